"""`ClaimantNeeds.most`: every tenant outside its few reads what `others` tells that tenant, whatever claimants come
and go (the lending rule's "every free node is owed" answer is shared on that ground: KeptClaims.owed_everywhere)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from schedkit import job

from greengpu.model import GPU_UNITS, Job
from greengpu.sched.claimants import ClaimantNeeds

TENANTS = [f"t{i}" for i in range(6)]


def _claimant(tenant: str, gpus: int, per_node: bool, share_units: int) -> Job:
    made: Job
    if share_units:
        made = job(f"{tenant}-share", gpus=share_units / GPU_UNITS, tenant=tenant)
    else:
        made = job(f"{tenant}-whole", gpus=gpus, tenant=tenant, gpus_per_node=gpus if per_node else None)
    return made


claimants = st.tuples(st.sampled_from(TENANTS), st.integers(1, 16), st.booleans(),
                      st.sampled_from([0, 0, 250, 500]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), claimants), max_size=12))
def test_every_tenant_but_the_few_reads_the_shared_answer(steps: list[tuple[bool, tuple[str, int, bool, int]]]) -> None:
    needs = ClaimantNeeds()
    present: dict[str, Job] = {}
    for add, (tenant, gpus, per_node, share_units) in steps:
        if tenant in present:
            if not add:
                needs.remove(tenant, present.pop(tenant))
        else:
            present[tenant] = _claimant(tenant, gpus, per_node, share_units)
            needs.add(tenant, present[tenant])
        few, answer = needs.most()
        for other in [*TENANTS, "nobody"]:
            if other not in few:
                assert needs.others(other) == answer
        assert len(few) <= 5


def test_the_smallest_claimants_tenants_are_set_apart() -> None:
    needs = ClaimantNeeds()
    needs.add("a", job("a1", gpus=2, tenant="a"))
    needs.add("b", job("b1", gpus=4, tenant="b", gpus_per_node=4))
    few, answer = needs.most()
    assert few == {"a", "b"}  # "a" is the only capped one too
    assert answer == (2, True, None)
    assert needs.others("a") == (4, False, None)
    assert needs.others("c") == answer
