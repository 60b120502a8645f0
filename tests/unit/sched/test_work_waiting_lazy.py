"""`work_waiting` reads each distinct wait once and sorts the waiting ids only when a body asks for them:
the answers are those of walking every job."""

from __future__ import annotations

from greengpu.sched.core import CycleResult
from greengpu.sched.waits import Wait, WaitReason
from greengpu.sleep.work_waiting import LEVER_BLOCKED_WAITS, NOTHING_WAITS, WorkWaiting, work_waiting

CAPACITY = Wait(WaitReason.CAPACITY, "a", ("A100",), 8)
WAKE = Wait(WaitReason.WAKE, "b", ("A100",), 4)
QUOTA = Wait(WaitReason.QUOTA, "c", ("A100",), 1, detail="over quota")


def walked(waits: dict[str, Wait]) -> tuple[str, ...]:
    return tuple(sorted(j for j, w in waits.items() if w.reason in LEVER_BLOCKED_WAITS))


def test_the_waiting_ids_and_flag_are_those_of_every_job() -> None:
    waits = {"j9": CAPACITY, "j1": QUOTA, "j3": WAKE, "j2": CAPACITY, "j0": QUOTA}
    lazy = work_waiting(CycleResult((), waits))
    assert lazy.waiting
    assert lazy.job_ids == walked(waits) == ("j2", "j3", "j9")
    assert lazy == WorkWaiting(("j2", "j3", "j9"))
    assert hash(lazy) == hash(WorkWaiting(("j2", "j3", "j9")))


def test_quota_waits_alone_are_not_work_waiting() -> None:
    lazy = work_waiting(CycleResult((), {"j1": QUOTA, "j2": QUOTA}))
    assert not lazy.waiting and lazy.job_ids == () and lazy == NOTHING_WAITS


def test_a_body_that_knows_only_ids_still_says_work_waits() -> None:
    assert WorkWaiting(("?",)).waiting and not WorkWaiting().waiting
