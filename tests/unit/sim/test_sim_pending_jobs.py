"""The replay's waiting jobs (greengpu.sim.jobs.PendingJobs) hand the core the same tuple until they change, and
a new one after any change, whichever way the dict was changed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from greengpu.model import Job, PendingJob
from greengpu.sim.jobs import PendingJobs


def waiting(number: int) -> PendingJob:
    return PendingJob(Job(f"j{number}", "a", 1.0, 60.0, submit_time_s=float(number)))


def filled() -> PendingJobs:
    jobs = PendingJobs()
    for number in range(3):
        jobs[f"j{number}"] = waiting(number)
    return jobs


def test_the_tuple_is_the_same_object_until_the_jobs_change() -> None:
    jobs = filled()
    first = jobs.as_tuple()
    assert first == tuple(jobs.values())
    assert jobs.as_tuple() is first
    _ = jobs.get("j1"), "j2" in jobs, list(jobs.items())  # reading changes nothing
    assert jobs.as_tuple() is first


CHANGES: dict[str, Callable[[PendingJobs], object]] = {
    "set": lambda jobs: jobs.__setitem__("j9", waiting(9)),
    "replace": lambda jobs: jobs.__setitem__("j1", PendingJob(jobs["j1"].job)),
    "del": lambda jobs: jobs.__delitem__("j0"),
    "pop": lambda jobs: jobs.pop("j2"),
    "pop missing with default": lambda jobs: jobs.pop("nope", None),
    "popitem": lambda jobs: jobs.popitem(),
    "clear": lambda jobs: jobs.clear(),
    "update": lambda jobs: jobs.update({"j7": waiting(7)}),
    "setdefault": lambda jobs: jobs.setdefault("j8", waiting(8)),
    "or-assign": lambda jobs: jobs.__ior__({"j6": waiting(6)}),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_every_change_gives_a_new_tuple_of_the_jobs_as_they_are(change: str) -> None:
    jobs = filled()
    before = jobs.as_tuple()
    CHANGES[change](jobs)
    after = jobs.as_tuple()
    assert after == tuple(jobs.values())
    if change != "pop missing with default":
        assert after != before or change == "replace"
    if change == "replace":
        assert after[1] is not before[1]
