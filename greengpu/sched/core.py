"""One scheduling cycle: a snapshot and a policy in, actions out. Pure: no I/O, no clock, no randomness.

The cycle, in order:
1. victims whose checkpoint grace has run out are killed (KillJob) and their GPUs freed; the
   nodes of victims still stopping stay held for the job they make room for; a victim whose
   beneficiary no longer waits (it started elsewhere) is not killed: its preemption is withdrawn;
2. pending jobs are taken in queue order (priority with age boost, fair share, age);
3. each job is checked against its tenant's quota, then placed best-fit on nodes that are neither
   held nor reserved; a job that ends before a reservation starts may backfill reserved nodes;
4. a job that does not fit may preempt (minimal, checkpoint-aware victim set) when it would then
   fit; otherwise the highest blocked jobs get reservations so that backfill cannot starve them;
5. jobs still blocked for capacity get room on waking or asleep nodes, and the asleep nodes that
   room needs are woken (WakeNode; see greengpu.sched.wake).
A gang is placed whole or not at all, and a waiting job holds no GPUs.
"""

from __future__ import annotations

from dataclasses import replace

from greengpu.model import (
    Action,
    ClusterSnapshot,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.books import books_for
from greengpu.sched.cycle.vocabulary import EVERYWHERE, CycleResult, alike_key
from greengpu.sched.cycle.walk import Cycle
from greengpu.sched.memory import SchedulerMemory
from greengpu.sched.shared_cycle import schedule_shared, split_shared
from greengpu.sched.waits import (
    WAIT_CAPACITY,
    WAIT_NO_MODEL,
    WAIT_PREEMPTING,
    WAIT_QUOTA,
    WAIT_WAKE,
)

__all__ = ["EVERYWHERE", "WAIT_CAPACITY", "WAIT_NO_MODEL", "WAIT_PREEMPTING", "WAIT_QUOTA", "WAIT_WAKE", "CycleResult",
           "SchedulerMemory", "alike_key", "schedule", "schedule_cycle"]

_Cycle = Cycle
"""The cycle class (greengpu.sched.cycle.walk), under the name tests patch."""


def schedule_cycle(snapshot: ClusterSnapshot, policy: SchedulerPolicy, interval_s: float = 60.0,
                   incremental: bool = True, purpose: str = "main",
                   memory: SchedulerMemory | None = None) -> CycleResult:
    """Run one scheduling cycle on `snapshot` under `policy`: actions plus why the rest waits.

    `memory` is what the caller keeps between its cycles (greengpu.sched.memory: a body creates one and passes
    it to every cycle); without it the cycle starts from a fresh one, with the same decisions at a fresh build's
    cost. `incremental=False` builds the free-GPU index and quota ledger from scratch instead of updating
    the remembered ones (see greengpu.sched.books), and decides every waiting job on its own instead
    of letting jobs alike share what was found for the first of them: the results are identical. `purpose` names a
    separate set of remembered books for what-if cycles whose snapshots differ systematically.
    """
    memory = memory if memory is not None else SchedulerMemory()
    whole, shared = split_shared(snapshot, memory)  # MIG and time-slice jobs: their own pass (sched.shared_cycle)
    books = books_for(whole, policy.borrow_non_interruptible, memory, incremental, purpose)
    try:
        cycle = _Cycle(whole, policy, interval_s, books, shortcuts=incremental)
        result = cycle.run()
        books.commit(cycle.started, cycle.stopped)
        if shared:
            extra = schedule_shared(snapshot, policy, shared, result.actions, memo=incremental, memory=memory)
            result = replace(result, actions=result.actions + tuple(extra.actions),
                             waits={**result.waits, **extra.waits},
                             unchanged_until_s=min(result.unchanged_until_s, extra.unchanged_until_s))
        return result
    except BaseException:
        memory.forget()
        raise


def schedule(snapshot: ClusterSnapshot, policy: SchedulerPolicy, interval_s: float = 60.0,
             memory: SchedulerMemory | None = None) -> tuple[Action, ...]:
    """The actions of one scheduling cycle (`memory` as for `schedule_cycle`)."""
    return schedule_cycle(snapshot, policy, interval_s, memory=memory).actions
