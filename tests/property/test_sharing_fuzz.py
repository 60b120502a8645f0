"""GPU sharing, fuzzed: the `mig:` and `time_slicing:` blocks and the `gpu_profile` column through the command
line's exit path (exit 0, or one line and exit 2, never a traceback); MIG geometry against a brute-force oracle;
random MIG and time-slice workloads replayed with every invariant holding."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
from pathlib import Path
from typing import Any
from unittest.mock import patch

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schedkit import job
from sharingkit import a100, lab

from greengpu.brain.control_tick import Scheduled, schedule
from greengpu.cli import main
from greengpu.config.policy import load_policy
from greengpu.model import TIMESLICE, ClusterSnapshot, Tenant
from greengpu.policy import Policy
from greengpu.sched.core import schedule_cycle
from greengpu.sched.memory import SchedulerMemory
from greengpu.sched.mig import A30_24GB, A100_40GB, GPU_80GB, MigFamily, fits
from greengpu.sim.engine import Simulation

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
FUZZ = settings(max_examples=120, deadline=None, derandomize=IN_CI, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

BASE: dict[str, Any] = {
    "site": {"pue": 1.3, "price_per_kwh": 0.12, "carbon_g_per_kwh": 380},
    "node_types": {"a100-4x": {
        "gpus": 4, "gpu_model": "A100-SXM4-40GB", "gpu_idle_w": 52, "gpu_max_w": 400, "host_idle_w": 300,
        "mig": {"gpus": 2, "profiles": ["1g.5gb", "3g.20gb"], "reconfigure_s": 60},
        "time_slicing": {"gpus": 1, "replicas": 4, "classes": ["interactive", "batch"]},
    }},
    "nodes": [{"name": "n[1-2]", "type": "a100-4x"}],
    "tenants": {"lab": {"quota_gpus": 4}},
}
ODD = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 100), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.lists(st.sampled_from(["1g.5gb", "3g.40gb", "batch", "training", "", 7]), max_size=4),
    st.sampled_from(["1g.5gb", "7g.80gb", "4g.24gb", "A30", "V100", "H100-SXM5-80GB", "timeslice", "1e400", "-1"]),
    st.dictionaries(st.sampled_from(["gpus", "profiles", "replicas", "classes", "x"]), st.integers(-2, 9),
                    max_size=3),
)
KEYS = [("gpu_model",), ("gpus",), ("mig",), ("mig", "gpus"), ("mig", "profiles"), ("mig", "reconfigure_s"),
        ("time_slicing",), ("time_slicing", "gpus"), ("time_slicing", "replicas"), ("time_slicing", "classes"),
        ("mig", "profiles", 0), ("time_slicing", "classes", 1)]


def run_cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, err.getvalue()


def assert_clean(code: int, err: str, file: Path) -> None:
    assert "Traceback" not in err, err
    assert code in (0, 2), err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith(f"greengpu: {file}"), err


@FUZZ
@given(key=st.sampled_from(KEYS), value=ODD, delete=st.booleans())
def test_sharing_blocks_mutated(tmp_path_factory: Any, key: tuple[Any, ...], value: Any, delete: bool) -> None:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    parent: Any = doc["node_types"]["a100-4x"]
    for part in key[:-1]:
        parent = parent[part]
    if delete:
        del parent[key[-1]]
    else:
        parent[key[-1]] = value
    path = tmp_path_factory.mktemp("inv") / "lab.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, err = run_cli("check", "--cluster", str(path), "--policy", "default")
    assert_clean(code, err, path)


@FUZZ
@given(profile=st.one_of(st.sampled_from(["1g.5gb", "3g.20gb", "7g.40gb", "timeslice", "TIMESLICE", "1g.5gb ",
                                          "3g.40gb", "2g.10gb", "", "nan", "1g", "@0", "1g.5gb@0"]),
                         st.text(max_size=8).filter(lambda t: "\n" not in t and "\r" not in t and "," not in t
                                                    and '"' not in t)),
       gpus=st.sampled_from(["1", "2", "0.5", "", "nan", "1.0"]),
       job_class=st.sampled_from(["batch", "interactive", "training", "inference", "x"]))
def test_gpu_profile_column_mutated(tmp_path_factory: Any, profile: str, gpus: str, job_class: str) -> None:
    folder = tmp_path_factory.mktemp("trace")
    cluster = folder / "lab.yaml"
    cluster.write_text(yaml.safe_dump(BASE), encoding="utf-8")
    trace = folder / "t.csv"
    trace.write_text("job_id,submit_time,duration_s,gpus,tenant,class,gpu_profile\n"
                     f"j1,0,600,{gpus},lab,{job_class},{profile}\n", encoding="utf-8")
    code, err = run_cli("simulate", "--cluster", str(cluster), "--trace", str(trace), "--policy", "always-on")
    assert "Traceback" not in err, err
    assert code in (0, 2), err
    if code == 2:
        assert err.count("\n") == 1, err


# ------------------------------------------------------------------ geometry against brute force


def brute_fits(family: MigFamily, profiles: list[str]) -> bool:
    """Any choice of allowed starts with disjoint memory slices and compute within the GPU's: tried one by one."""
    shapes = [family.profiles[p] for p in profiles]
    for starts in itertools.product(*(s.starts for s in shapes)):
        slices = [set(range(start, start + s.memory)) for start, s in zip(starts, shapes, strict=True)]
        if sum(len(x) for x in slices) == len(set().union(*slices)) and \
                sum(s.compute for s in shapes) <= family.compute_slices:
            return True
    return not shapes


@settings(max_examples=300, deadline=None, derandomize=IN_CI, database=None)
@given(data=st.data(), family=st.sampled_from([A100_40GB, GPU_80GB, A30_24GB]))
def test_fits_agrees_with_brute_force(data: st.DataObject, family: MigFamily) -> None:
    profiles = data.draw(st.lists(st.sampled_from(sorted(family.profiles)), max_size=6))
    assert fits(family, profiles) == brute_fits(family, profiles)


# ------------------------------------------------------------------ random workloads, replayed


def _compared(snapshot: ClusterSnapshot, policy: Policy, memory: SchedulerMemory | None = None) -> Scheduled:
    """The tick's scheduling (with the replay's memory), checked against a cycle that decides every job on its
    own (no memos)."""
    got = schedule(snapshot, policy, memory)
    alone = schedule_cycle(snapshot, policy.scheduler, policy.interval_s, incremental=False, purpose="compare")
    assert got.cycle.actions == alone.actions
    assert dict(got.cycle.waits) == dict(alone.waits)
    return got



@settings(max_examples=int(os.environ.get("SHARING_EXAMPLES", "60")), deadline=None, derandomize=IN_CI,
          database=None)
@given(jobs=st.lists(st.tuples(st.sampled_from(["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", TIMESLICE,
                                                "", "half"]),
                               st.sampled_from(["batch", "interactive", "inference", "training"]),
                               st.integers(0, 7200), st.integers(60, 7200), st.sampled_from(["a", "b"])),
                     min_size=1, max_size=30),
       policy=st.sampled_from(["always-on", "default"]), reconfigure_s=st.sampled_from([0.0, 60.0, 900.0]))
def test_random_sharing_workloads_keep_every_invariant(jobs: list[tuple[str, str, int, int, str]], policy: str,
                                                       reconfigure_s: float) -> None:
    cluster = lab(a100("mixed", mig=2, sliced=1, replicas=3, reconfigure_s=reconfigure_s),
                  a100("mig", mig=4, reconfigure_s=reconfigure_s),
                  tenants=(Tenant("a", 2.0, borrow_limit_gpus=1.0), Tenant("b", 2.0, borrow_limit_gpus=2.0)))
    built = []
    for i, (profile, job_class, submit, duration, tenant) in enumerate(jobs):
        if profile == TIMESLICE and job_class not in ("batch", "interactive"):
            job_class = "batch"
        built.append(job(f"j{i}", tenant=tenant, job_class=job_class, submit_time_s=float(submit),
                         duration_s=float(duration), gpus=0.5 if profile == "half" else 1,
                         gpu_profile="" if profile == "half" else profile))
    sim = Simulation(cluster, load_policy(policy), built)
    sim.checks.full_check_every = 1  # the independent oracle after every cycle
    sim.check_known_cycles = True  # a cycle skipped on the core's promise is asked anyway and must agree
    with patch("greengpu.sim.engine.schedule", _compared):
        result = sim.run()
    assert result.invariant_violations == 0, sim.checks.examples
    assert result.jobs_completed == len(built)
