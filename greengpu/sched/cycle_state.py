"""The state one scheduling cycle works on: the free-GPU index and quota ledger it updates as it decides,
who holds which nodes for whom, the reservations, typed waits, and the memos that keep a cycle fast
(failure frontier of request shapes, allowed models, fair-share figures). The decisions themselves are
in greengpu.sched.core; this class only keeps the books they read and write.
"""

from __future__ import annotations

from greengpu.model import (
    Action,
    ClusterSnapshot,
    GpuSlot,
    Job,
    KillJob,
    PendingJob,
    RunningJob,
)
from greengpu.policy import SchedulerPolicy
from greengpu.sched.backfill import Reservation
from greengpu.sched.books import Books
from greengpu.sched.node_rules import NodeRules
from greengpu.sched.order import fair_share
from greengpu.sched.placement import allowed_models, chunks_for, place, warning_gpus_by_node
from greengpu.sched.preemption import VictimFinder
from greengpu.sched.waits import (
    Wait,
    WaitReason,
)


class CycleState:
    """The books of one cycle (see the module docstring)."""

    def __init__(self, snapshot: ClusterSnapshot, policy: SchedulerPolicy, interval_s: float, books: Books,
                 shortcuts: bool = True) -> None:
        self.snapshot = snapshot
        self.shortcuts = shortcuts
        """Whether jobs alike share what was found for the first of them (quota verdicts, failed
        backfills, waits); False decides every job on its own, to check that the results are the same."""
        self.policy = policy
        self.now_s = snapshot.time_s
        self.interval_s = interval_s
        self.books = books
        self.state = books.state
        self.ledger = books.ledger
        self.started: list[RunningJob] = []
        self.stopped: list[str] = []
        self.withdrawn: list[str] = []
        cluster = snapshot.cluster
        self.weights = {name: t.weight for name, t in cluster.tenants.items()}
        self.usage = snapshot.tenant_usage_gpu_s
        self.actions: list[Action] = []
        self.waits: dict[str, Wait] = {}
        self._wait_memo = books.wait_memo
        self._models_of: dict[frozenset[str] | None, tuple[str, ...]] = {}
        self.reservations: list[Reservation] = []
        self.head: list[PendingJob] = []
        """The jobs decided while preemption attempts or reservations were left, in order: the part of the
        queue whose order the decisions depend on (greengpu.sched.steady)."""
        self.reserved_nodes: dict[int, float] = {}
        self.held_for: dict[str, set[int]] = {}
        self.holder_of: dict[int, str] = {}
        self.stopping_for: dict[str, list[RunningJob]] = {}
        self.finder = VictimFinder(self.state, self.ledger, policy.preemption, self.now_s, snapshot.running,
                                   snapshot.pending, memo_searches=shortcuts,
                                   lowest_priority_anywhere=books.lowest_priority(),
                                   ahead_memo=books.queue_ahead if shortcuts else None, grouped_memo=books.grouped)
        self._shares: dict[str, float] = {}
        self._excluded_shared: set[int] | None = None
        self._latest_reserved_start_s = -1.0
        # Failure frontier: within a cycle free capacity only shrinks (until something is released),
        # so once a request shape fails, any request of that shape at least as large fails too.
        self._smallest_failed: dict[tuple[object, ...], int] = {}
        self._released_version = 0
        self._shapes: dict[tuple[object, ...], tuple[object, ...]] = {}
        # The same frontier for backfill: a job fails to backfill when one of its request shape with no
        # more units and no later end failed (it may use only the reserved nodes free until its end, a
        # subset of those the earlier one could use), until GPUs are released or holds/reservations change.
        self._backfill_failed: dict[tuple[object, ...], list[tuple[int, float]]] = {}
        self._layout_version = 0  # bumped whenever the nodes held or reserved change
        # Quota verdicts per kind of request, with the version of its tenant's usage they were found under: a
        # saturated queue asks the same few questions thousands of times per cycle.
        self._quota_memo: dict[tuple[object, ...], tuple[int, Wait | None]] = {}
        # The waits of jobs decided once nothing but placement is left (see _Cycle.consider_alike).
        self._alike_waits: dict[tuple[object, ...], Wait] = {}
        self._alike_token: tuple[int, int] = (-1, -1)
        # Per kind of job, the earliest end for which a backfill was refused only because the nodes it could use
        # are owed to claimants (greengpu.sched.claims): valid with the same token.
        self._alike_lending_refused: dict[tuple[object, ...], float] = {}
        # Per kind of job, the earliest end of a job of it that `wait_alike` gave its kind's wait with the same
        # token: a job of the kind ending no earlier waits alike (every reason a backfill fails holds for a later
        # end as well). The walk gives it that wait without asking.
        self._alike_wait_from: dict[tuple[object, ...], float] = {}
        # Per kind of job, what its memos above read besides `_alike_state`: its tenant's usage version, and None,
        # EVERYWHERE or the claims' state when it read the lending rule (greengpu.sched.cycle.alike `_kind_valid`).
        self._alike_marks: dict[tuple[object, ...], tuple[int, object]] = {}
        self._claims_probe: object = None
        """What of the lending rule the step being decided read (greengpu.sched.cycle.lending `_claims_read`)."""
        self._placed_ahead: tuple[PendingJob, object, tuple[GpuSlot, ...]] | None = None
        """The job `wait_alike` last found could start, the state it was found on (epoch and layout version) and
        its slots: `consider` takes them when it decides that job on that state (greengpu.sched.cycle.alike)."""
        self._kind_standing: dict[tuple[object, ...], tuple[int, Wait | None, Wait | None, tuple[str, ...]]] = {}
        """Per kind, what `refused_wait` read of its tenant (greengpu.sched.cycle.alike `_standing_of`)."""
        self._everywhere_most: dict[tuple[str, ...], tuple[object, frozenset[str], bool]] = {}
        """Per set of models, the epoch and KeptClaims.owed_everywhere_by_most's answer at it."""
        self._vouched: dict[tuple[object, ...], tuple[int, Wait]] = {}
        """Per kind with no memo, the wait `refused_wait` gave it and its tenant's usage version then: the walk gives
        it to the kind's later jobs without asking while both hold (greengpu.sched.cycle.known_kinds `_vouch`)."""
        self._vouched_refused: dict[tuple[str, ...], set[tuple[object, ...]]] = {}
        """Per set of models, the vouched kinds that are refusals by the lending rule (they hold per epoch)."""
        self._vouched_epoch: object = None
        self._valid_at: dict[tuple[object, ...], object] = {}
        """Per kind, the epoch at which its memos were last found to hold (greengpu.sched.cycle.alike `_valid_now`)."""
        self._refuses: dict[tuple[str, tuple[str, ...], int], tuple[object, bool]] = {}
        """`_lending_refuses` answers with the tenant usage version and epoch they were found at."""
        self.attempts_left = 0
        self.reservations_left = 0
        self._wakeable: dict[str, list[int]] | None = None
        self._rules: NodeRules | None = None
        """The nodes constrained jobs may not use (built for the first such job: most cycles have none)."""
        self._nothing_left_key: tuple[int, ...] = ()
        self._nothing_left = False

    # -------------------------------------------------------------- helpers

    def models_for(self, job: Job) -> tuple[str, ...]:
        """The GPU models `job` allows that the cluster has (cached per set of allowed types)."""
        models = self._models_of.get(job.gpu_types)
        if models is None:
            models = self._models_of[job.gpu_types] = allowed_models(self.state, job)
        return models

    def wait(self, job: Job, reason: WaitReason, detail: str = "") -> Wait:
        """The typed wait of `job` (shared between jobs alike in everything it records)."""
        key = (reason, job.tenant, job.gpu_types, job.units, job.gpus_per_node, detail)
        found = self._wait_memo.get(key)
        if found is None:
            models = self.models_for(job)
            node_gpus = 0
            spans_nodes = False
            if models and reason is not WaitReason.NO_MODEL:
                sizes = self.state.node_size_by_model
                pieces = [chunks_for(job, sizes[m]) if not job.is_fractional else [1] for m in models]
                smallest = [min(c) for c in pieces if c]
                node_gpus = min(smallest) if smallest else 0
                spans_nodes = all(c is None or len(c) > 1 for c in pieces)
            if reason is WaitReason.CAPACITY and spans_nodes:
                reason = WaitReason.GANG
            found = self._wait_memo[key] = Wait(reason, job.tenant, models, node_gpus, detail=detail)
        return found

    def _set_wait(self, job: Job, reason: WaitReason, detail: str = "") -> None:
        self.waits[job.job_id] = self.wait(job, reason, detail)

    def share_of(self, tenant: str) -> float:
        """The tenant's fair-share figure, cached until its allocation changes."""
        share = self._shares.get(tenant)
        if share is None:
            share = fair_share(self.ledger.total_units.get(tenant, 0), self.usage.get(tenant, 0.0),
                               self.weights.get(tenant, 1.0), self.policy.fair_share.usage_weight)
            self._shares[tenant] = share
        return share

    def _charge(self, running: RunningJob, sign: int) -> None:
        self.ledger.charge(running, sign)
        self._shares.pop(running.job.tenant, None)

    def _hold(self, job_id: str, nodes: set[int] | frozenset[int]) -> None:
        self._layout_changed()
        for node in nodes:
            if node not in self.holder_of:
                self.holder_of[node] = job_id
                self.held_for.setdefault(job_id, set()).add(node)

    def _layout_changed(self) -> None:
        """The held or reserved nodes changed: forget what was derived from them."""
        self._excluded_shared = None
        self._layout_version += 1

    def request_shape(self, job: Job, models: tuple[str, ...]) -> tuple[object, ...]:
        """What placement sees of `job`'s request (requests alike in it compare by size)."""
        request = (job.gpu_types, job.units, job.gpus_per_node)
        shape = self._shapes.get(request)
        if shape is None:
            shape = self._shapes[request] = self._request_shape(job, models)
        return shape

    def backfill_known_to_fail(self, job: Job, models: tuple[str, ...], ends_at_s: float) -> bool:
        """Whether a job of the same request shape, no larger and ending no later, already failed to
        backfill on the nodes as they are now."""
        if not self.shortcuts or job.node_rule is not None:
            return False  # a constrained job may use fewer nodes than others of its shape: never compared
        failed = self._backfill_failed.get((self.request_shape(job, models), self._released_version,
                                            self._layout_version))
        if failed:
            units = job.units
            for failed_units, failed_end_s in failed:
                if units >= failed_units and ends_at_s >= failed_end_s:
                    return True
        return False

    def backfill_failed(self, job: Job, models: tuple[str, ...], ends_at_s: float) -> None:
        """Remember that `job` could not backfill (see backfill_known_to_fail)."""
        if job.node_rule is not None:
            return
        key = (self.request_shape(job, models), self._released_version, self._layout_version)
        self._backfill_failed.setdefault(key, []).append((job.units, ends_at_s))

    def _excluded_for(self, job_id: str) -> set[int]:
        """Nodes held or reserved for other jobs (shared set: callers must not change it)."""
        own = self.held_for.get(job_id)
        if own is None:
            if self._excluded_shared is None:
                self._excluded_shared = set(self.holder_of) | set(self.reserved_nodes)
            return self._excluded_shared
        excluded = {n for n in self.holder_of if n not in own}
        excluded.update(n for n in self.reserved_nodes if n not in own)
        return excluded

    def rules(self) -> NodeRules:
        """The cycle's node rules (greengpu.sched.node_rules)."""
        if self._rules is None:
            self._rules = NodeRules(self.state, self.snapshot.cluster)
        return self._rules

    def excluded_for_job(self, job: Job) -> set[int]:
        """`_excluded_for(job.job_id)` plus the nodes the job's own constraints bar (the same shared set for a job
        without constraints: callers must not change it)."""
        excluded = self._excluded_for(job.job_id)
        if job.node_rule is None:
            return excluded
        return excluded | self.rules().barred(job)

    def _release(self, slots: tuple[GpuSlot, ...]) -> None:
        self.state.release(slots)
        self._released_version += 1

    def _shape(self, job_id: str, job: Job, models: tuple[str, ...]) -> tuple[object, ...] | None:
        if job_id in self.held_for or job.node_rule is not None:
            return None  # placed with its own held nodes, or on the nodes it allows: not comparable with other jobs
        return (self.request_shape(job, models), self._released_version)

    def _request_shape(self, job: Job, models: tuple[str, ...]) -> tuple[object, ...]:
        sizes = self.state.node_size_by_model
        gpus = job.whole_gpus
        # Which models could take it on one node, and whether it may use whole-node reserves, change
        # how it is placed: only requests alike in those are comparable by size.
        single_models = tuple(m for m in models if gpus <= sizes[m])
        big = not job.is_fractional and gpus >= max(sizes[m] for m in models)
        return (models, single_models, job.gpus_per_node, job.is_fractional, big)

    def _place(self, pending: PendingJob, models: tuple[str, ...], excluded: set[int]) -> tuple[GpuSlot, ...] | None:
        job = pending.job
        shape = self._shape(job.job_id, job, models)
        size = job.units
        if shape is not None:
            failed = self._smallest_failed.get(shape)
            if failed is not None and size >= failed:
                return None
        slots = place(self.state, job, excluded=excluded, whole_node_reserve=self.policy.whole_node_reserve,
                      warning=warning_gpus_by_node(self.state, self.snapshot.node_states))  # GPU health
        if slots is None and shape is not None:
            self._smallest_failed[shape] = min(size, self._smallest_failed.get(shape, size))
        return slots

    def _stop(self, victim: RunningJob, for_job_id: str, reason: str) -> None:
        self.finder.stopping.add(victim.job.job_id)
        self._release(victim.slots)
        self._charge(victim, -1)
        self.stopped.append(victim.job.job_id)
        self.actions.append(KillJob(victim.job.job_id, reason, for_job_id or None))

    # -------------------------------------------------------------- steps
