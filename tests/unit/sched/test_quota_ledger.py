"""The scheduler's quota ledger, method by method, against figures worked out by hand.

The scheduler scenarios exercise the ledger through whole cycles, where many of its answers are
masked by other rules (a tenant at its quota is never a victim candidate in the first place, ...).
Here each admission rule is pinned at its boundary: exactly at quota, one milli-GPU over, per model.
"""

from __future__ import annotations

import math

from schedkit import job, make_cluster, node_type

from greengpu.model import GPU_UNITS, GpuSlot, RunningJob, Tenant
from greengpu.sched.quota import ANY_MODEL, QuotaLedger

TENANTS = [
    Tenant("flat", quota_gpus=2, borrow_limit_gpus=1),
    Tenant("open", quota_gpus=1),  # may borrow any idle capacity
    Tenant("models", quota_gpus=50, quota_gpus_by_model={"V100": 2}, borrow_limit_gpus=1, max_gpu_memory_gb=100),
]
CLUSTER = make_cluster([(1, node_type(8, "A100", memory_gb=80), "r"), (1, node_type(8, "V100", memory_gb=32), "r")],
                       TENANTS)
MODEL_OF_NODE = {"n0000": "A100", "n0001": "V100"}
MEMORY_OF_NODE = {"n0000": 80.0, "n0001": 32.0}


def ledger(borrow_non_interruptible: bool = False) -> QuotaLedger:
    return QuotaLedger(CLUSTER, MODEL_OF_NODE, MEMORY_OF_NODE, borrow_non_interruptible)


def held(job_id: str, tenant: str, node: str, gpus: list[int], units: int = GPU_UNITS,
         **kwargs: object) -> RunningJob:
    return RunningJob(job=job(job_id, tenant=tenant, gpus=units * len(gpus) / GPU_UNITS, **kwargs),
                      slots=tuple(GpuSlot(node, g, units) for g in gpus), start_time_s=0, expected_end_s=1)


def test_keys_nominal_and_limits() -> None:
    books = ledger()
    flat, opened, models = (books.tenant(n) for n in ("flat", "open", "models"))
    assert books.key(flat, "A100") == ANY_MODEL
    assert books.key(models, "A100") == "A100"
    assert books.nominal_units(flat, ANY_MODEL) == 2000
    assert books.nominal_units(models, "V100") == 2000
    assert books.nominal_units(models, "A100") == 0  # per-model quotas replace quota_gpus
    assert books.limit_units(flat, ANY_MODEL) == 3000
    assert books.limit_units(models, "A100") == 1000
    assert books.limit_units(opened, ANY_MODEL) == math.inf
    assert books.tenant("stranger") == Tenant("stranger")


def test_charge_counts_per_key_and_totals_and_uncharge_gives_back() -> None:
    books = ledger()
    v100 = held("v", "models", "n0001", [0, 1, 2])
    a100 = held("a", "models", "n0000", [0])
    flat = held("f", "flat", "n0000", [1, 2], units=500)
    for running in (v100, a100, flat):
        books.charge(running)
    assert books.used("models", "V100") == 3000 and books.used("models", "A100") == 1000
    assert books.used("models", ANY_MODEL) == 0
    assert books.used("flat", ANY_MODEL) == 1000
    assert books.total_units == {"models": 4000, "flat": 1000}
    assert books.memory_gb == {"models": 3 * 32.0 + 80.0}
    version = books.version
    books.charge(v100, sign=-1)
    assert books.version == version + 1
    assert books.used("models", "V100") == 0 and books.total_units["models"] == 1000
    assert books.memory_gb["models"] == 80.0


def test_over_nominal_is_zero_at_quota_and_the_excess_above_it() -> None:
    books = ledger()
    books.charge(held("f", "flat", "n0000", [0, 1]))
    assert books.over_nominal_units("flat", "A100") == 0
    assert books.tenants_over_nominal() == set()
    books.charge(held("g", "flat", "n0000", [2], units=250))
    assert books.over_nominal_units("flat", "V100") == 250  # one key for every model
    books.charge(held("v", "models", "n0001", [0, 1]))
    books.charge(held("a", "models", "n0000", [3]))
    assert books.over_nominal_units("models", "V100") == 0
    assert books.over_nominal_units("models", "A100") == 1000
    assert books.tenants_over_nominal() == {"flat", "models"}


def test_admission_at_the_boundaries() -> None:
    books = ledger()
    books.charge(held("f", "flat", "n0000", [0]))
    assert books.admission_problem(job("in", tenant="flat", gpus=1), "A100", 1000) is None  # up to quota
    assert books.within_nominal_after(job("in", tenant="flat", gpus=1), "A100", 1000)  # exactly at quota
    assert not books.within_nominal_after(job("in", tenant="flat", gpus=1), "A100", 1001)
    assert books.admission_problem(job("b", tenant="flat", gpus=2), "A100", 2000) is None  # up to the limit
    assert books.admission_problem(job("b", tenant="flat", gpus=2), "A100", 2001) == \
        "tenant at its quota plus borrowing limit"
    firm = job("i", tenant="flat", gpus=2, interruptible=False)
    assert books.admission_problem(firm, "A100", 1000) is None  # within quota: fine
    assert books.admission_problem(firm, "A100", 2000) == \
        "would borrow quota, and the job cannot be preempted to give it back"
    assert ledger(borrow_non_interruptible=True).admission_problem(firm, "A100", 2000) is None
    assert books.admission_problem(job("o", tenant="open", gpus=64), "A100", 64_000) is None


def test_per_model_admission_uses_the_model_key() -> None:
    books = ledger()
    books.charge(held("v", "models", "n0001", [0, 1]))
    big = job("x", tenant="models", gpus=1)
    assert books.within_nominal_after(big, "A100", 0)
    assert not books.within_nominal_after(big, "V100", 1)
    assert books.admission_problem(big, "A100", 1000) is None
    assert books.admission_problem(big, "V100", 1000) is None  # 3 of 2 + 1
    books.charge(held("v2", "models", "n0001", [2]))
    assert books.admission_problem(big, "V100", 1) == "tenant at its quota plus borrowing limit"


def test_memory_cap_and_memory_of_a_share() -> None:
    books = ledger()
    books.charge(held("v", "models", "n0001", [0, 1]))  # 64 GB of V100 memory
    assert books.memory_problem(job("m", tenant="models", gpus=1), 36.0) is None  # exactly at the 100 GB cap
    assert books.memory_problem(job("m", tenant="models", gpus=1), 36.5) == "tenant at its GPU memory cap"
    assert books.memory_problem(job("m", tenant="flat", gpus=1), 1e6) is None  # no cap
    share = job("s", tenant="models", gpus=0.5)
    assert books.job_memory_gb(share, ["n0000"], {"n0000": 500}) == 40.0
    asked = job("s", tenant="models", gpus=0.5, gpu_memory_gb=12.0)
    assert books.job_memory_gb(asked, ["n0000"], {"n0000": 500}) == 12.0


def test_violations_name_the_tenant_the_key_and_the_limit() -> None:
    books = ledger()
    books.charge(held("f", "flat", "n0000", [0, 1, 2]))
    books.charge(held("o", "open", "n0000", [3, 4, 5, 6, 7]))
    assert books.violations() == []
    books.charge(held("g", "flat", "n0001", [0], units=100))
    books.charge(held("a", "models", "n0000", [7], units=1000))
    books.charge(held("b", "models", "n0001", [1, 2]))
    assert books.violations() == ["tenant flat holds 3.1 GPUs on *, above quota plus borrowing 3"]
    books.charge(held("c", "models", "n0000", [6], units=1))
    assert books.violations() == ["tenant flat holds 3.1 GPUs on *, above quota plus borrowing 3",
                                  "tenant models holds 1.001 GPUs on A100, above quota plus borrowing 1"]


def test_a_gang_over_two_nodes_of_one_model_counts_all_its_gpus_on_that_model() -> None:
    cluster = make_cluster([(2, node_type(4, "V100"), "r")], [Tenant("m", quota_gpus_by_model={"V100": 8})])
    books = QuotaLedger(cluster, {"n0000": "V100", "n0001": "V100"}, {}, False)
    gang = RunningJob(job=job("g", tenant="m", gpus=6),
                      slots=tuple(GpuSlot(n, g) for n, count in (("n0000", 4), ("n0001", 2)) for g in range(count)),
                      start_time_s=0, expected_end_s=1)
    books.charge(gang)
    assert books.used("m", "V100") == 6000


def test_a_tenant_without_a_limit_does_not_stop_the_search_for_violations() -> None:
    cluster = make_cluster([(1, node_type(8, "A100"), "r")],
                           [Tenant("aaa", quota_gpus=0), Tenant("zzz", quota_gpus=0, borrow_limit_gpus=1)])
    books = QuotaLedger(cluster, {"n0000": "A100"}, {}, False)
    books.charge(held("a", "aaa", "n0000", [0, 1, 2]))
    books.charge(held("z", "zzz", "n0000", [3, 4]))
    assert books.violations() == ["tenant zzz holds 2 GPUs on *, above quota plus borrowing 1"]


def test_per_model_reclaim_counts_the_models_own_quota() -> None:
    books = ledger()
    mine = job("x", tenant="models", gpus=1)
    assert books.within_nominal_after(mine, "V100", 1000)  # 1 of 2 V100s
    assert books.within_nominal_after(mine, "V100", 2000)
    assert not books.within_nominal_after(mine, "A100", 1000)  # no A100 quota


def test_a_node_without_known_memory_holds_none() -> None:
    share = job("s", tenant="models", gpus=0.5)
    assert ledger().job_memory_gb(share, ["elsewhere"], {"elsewhere": 500}) == 0.0
