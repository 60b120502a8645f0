"""What the walk may skip: kinds of job whose every member waits as the first did (carried from the last cycle
or found in this one), the jobs left once the cluster is full for ordinary jobs (only held, short or special jobs
can still start), and the claimants the lending rule reads."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Hashable, Iterator
from typing import cast

from greengpu.model import (
    PendingJob,
)
from greengpu.sched.claims import Claimant, claimants_of
from greengpu.sched.cycle.alike import AlikeWaits
from greengpu.sched.cycle.vocabulary import EVERYWHERE
from greengpu.sched.index_order import IndexOrder, KnownWaits
from greengpu.sched.pending_index import PendingIndex, RestOfWalk
from greengpu.sched.waits import (
    Wait,
    WaitReason,
)


class KnownKinds(AlikeWaits):
    """The walk's shortcuts over kinds of job whose verdict is known."""

    def _carry_kinds(self) -> None:
        """Keep for the next cycle the kinds whose every job waits for a reason that outlives the cycle: a quota
        wait (it reads only its tenant's usage, whose version the books keep) or a refusal on every free node (the
        next cycle asks `owed_everywhere` again before it believes it). Other waits read free GPUs, which ends and
        arrivals between cycles change."""
        versions = self.ledger.tenant_version
        self.books.kinds = {key: (wait, version, claims) for key, (wait, (version, claims)) in
                            self._durable_kinds().items() if versions.get(wait.tenant, 0) == version}

    def _carried_kinds(self, index: PendingIndex) -> None:
        """Take in the kinds the last cycle carried (`_carry_kinds`) that still wait in the queue and whose tenant's
        usage is the same: every job of such a kind waits without being asked, while its memo holds (`_kind_valid`
        asks `owed_everywhere` again for a refusal). A refusal's wait is found again: whether a sleeping node could
        take the kind is this cycle's."""
        carried = self.books.kinds
        if not carried:
            return
        self._sync_alike_memos()
        versions = self.ledger.tenant_version
        by_kind = index.by_kind
        wake_memo: dict[tuple[object, ...], bool] = {}
        for key, (wait, version, claims) in carried.items():
            entries = by_kind.get(key)
            if not entries or versions.get(wait.tenant, 0) != version:
                continue
            if claims is EVERYWHERE:
                job = entries[0][2].job
                shape = (job.gpu_types, job.units, job.gpus_per_node)
                wakes = wake_memo.get(shape)
                if wakes is None:
                    wakes = wake_memo[shape] = self.fits_after_wake(job, self.models_for(job))
                wait = self.wait(job, WaitReason.WAKE if wakes else WaitReason.CAPACITY)
            self._keep_kind(key, wait, (version, claims))

    def _skip_known(self, order: IndexOrder, index: PendingIndex, kind_waits: dict[Hashable, tuple[Wait, object]],
                    considered: list[PendingJob]) -> None:
        """Take from `order`, up to the first job that might start, every job the walk would give a wait without
        asking: its kind's (`kind_waits`, from `_waiting_kinds`, while its memos hold), the one `_known_wait`
        gives, or, for a kind with no memo that holds, its quota's or its refusal by the lending rule everywhere
        (`refused_wait`). Nothing changes while jobs only wait (not the state, nor the shares the order reads, nor
        whether anything is left to try), so each costs one step of the merge and its wait (IndexOrder.take_while)."""
        if self._alike_state() != self._alike_token:
            return
        kind_of, waits, now_s = index.kind_of, self.waits, self.now_s
        marks, alike_waits, wait_from = self._alike_marks, self._alike_waits, self._alike_wait_from
        epoch = self._epoch()
        valid_at = self._valid_at
        own = self.held_for.keys() | self.stopping_for.keys()  # decided on their own, never as their kind
        refused_wait = self.refused_wait
        vouched = self._vouched
        if vouched:
            self._recheck_vouched(index, epoch)

        def wait_of(entry: tuple[float, str, PendingJob]) -> Wait | None:
            job_id = entry[1]
            if own and job_id in own:
                return None
            key = cast(tuple[object, ...], kind_of[job_id])
            if key not in marks:
                # No memo of its kind (so none valid at this epoch): the walk asks it, unless it is refused whatever
                # it asks for; then the rest of its kind take that wait without a call while it holds.
                if kind_waits:
                    kind_waits.pop(key, None)
                job = entry[2].job
                wait = refused_wait(job, key, epoch)
                if wait is not None:
                    self._vouch(key, wait)
                return wait
            if valid_at.get(key) != epoch and not self._valid_now(key, entry[2].job, epoch):
                kind_waits.pop(key, None)
                # Its kind's memos no longer hold: the walk asks it, unless it is refused whatever it asks for.
                return refused_wait(entry[2].job, key, epoch)
            known = kind_waits.get(key)
            if known is not None and marks.get(key) is known[1]:
                return known[0]
            bound = wait_from.get(key)
            if bound is None or now_s + entry[2].job.duration_s < bound:
                return None  # it might start: the walk asks it
            return alike_waits[key]

        known = KnownWaits(cast(dict[object, tuple[int, object]], vouched), kind_of, self.ledger.tenant_version, own)
        order.take_while(wait_of, cast(dict[str, object], waits), considered, known)

    def _vouch(self, key: tuple[object, ...], wait: Wait) -> None:
        """Keep `refused_wait`'s answer for a kind with no memo (`_vouched`), stamped with its tenant's usage version;
        a refusal is also filed under its models (`_recheck_vouched` drops it once not every free node is owed)."""
        standing = self._kind_standing[key]
        self._vouched[key] = (standing[0], wait)
        if standing[1] is None:
            self._vouched_refused.setdefault(standing[3], set()).add(key)

    def _recheck_vouched(self, index: PendingIndex, epoch: object) -> None:
        """Drop the vouched refusals (`_vouch`) that may not hold at `epoch`: all of a set of models once not every
        free node is owed to another tenant's claimant, and those of the few tenants whose own claimants set them
        apart (they are asked again). A quota wait holds while its tenant's usage version does (checked per job)."""
        if self._vouched_epoch == epoch:
            return
        self._vouched_epoch = epoch
        vouched, kinds_of_tenant = self._vouched, index.kinds_of_tenant
        for models, kinds in self._vouched_refused.items():
            if not kinds:
                continue
            most = self._everywhere_most_at(models, epoch)
            if not most[2]:
                for key in kinds:
                    vouched.pop(key, None)
                kinds.clear()
                continue
            for tenant in most[1]:
                for kind in kinds_of_tenant.get(tenant, ()):
                    if kind in kinds:
                        vouched.pop(cast(tuple[object, ...], kind), None)
                        kinds.discard(cast(tuple[object, ...], kind))

    def _rest_of_walk(self, in_order: Iterator[PendingJob], index: PendingIndex) -> RestOfWalk:
        """The jobs `in_order` has not yet given, in its order, taken only if asked for (after the cycle, maybe)."""
        for _, tenant in index.by_priority:
            self.share_of(tenant)  # remembered now: the ledger the shares read moves on after the cycle
        return RestOfWalk(in_order)

    def _waiting_kinds(self, index: PendingIndex) -> tuple[dict[Hashable, Wait], bool] | None:
        """Once no preemption attempt or reservation is left: the kinds of job whose every undecided job would wait
        as the first of its kind (`wait_alike`), with that wait; and whether that is every job not yet decided.
        Changes nothing but memos. None while a job with held nodes or victims of its own waits undecided.

        Asks two jobs per kind, not every job: its longest waiting one (a job alike waits alike unless it
        can backfill) and its shortest one short enough to backfill (if it cannot, no job of its kind ending
        later can: it may use only a subset of the same reserved nodes)."""
        waits = self.waits
        started = {running.job.job_id for running in self.started}

        def undecided(job_id: str) -> bool:
            return job_id not in waits and job_id not in started

        if any(undecided(job_id) and job_id in index.by_job_id for job_id in (*self.held_for, *self.stopping_for)):
            # Not before the jobs with nodes or victims of their own are decided: they are never decided as their
            # kind is (they may start on their nodes), and one that starts frees the rest of the nodes it held.
            return {}, False
        now_s, latest_s = self.now_s, self._latest_reserved_start_s
        models_for = self.models_for
        found: dict[Hashable, Wait] = {}
        every_kind = True
        for kind, entries in index.by_kind.items():
            longest = next((e for e in reversed(entries) if undecided(e[1])), None)
            if longest is None:
                continue  # every job of its kind was decided
            wait = self.wait_alike(longest[2], models_for(longest[2].job))
            if wait is not None and now_s + entries[0][0] <= latest_s:
                short = next(e[2] for e in entries if undecided(e[1]))
                if now_s + short.job.duration_s <= latest_s and self.wait_alike(short, models_for(short.job)) is None:
                    wait = None
            if wait is None:
                every_kind = False  # one of its jobs might start: the walk decides them in turn
            else:
                found[kind] = wait
        return found, every_kind

    def _claimants_reader(self, index: PendingIndex | None) -> Callable[[], dict[str, Claimant]]:
        """How the cycle's claimants are read when first needed, leaving out the jobs the cycle started so far:
        from the kept queue (each kind's shortest job and each tenant's oldest), or by walking the snapshot; the
        same claimants either way."""
        started = self.started
        if index is None:
            pending = self.snapshot.pending

            def from_snapshot() -> dict[str, Claimant]:
                gone = {r.job.job_id for r in started}
                return claimants_of(p.job for p in pending if p.job.job_id not in gone)
            return from_snapshot

        def from_index() -> dict[str, Claimant]:
            gone = {r.job.job_id for r in started}
            first: dict[str, float] = {}
            for (_, tenant), entries in index.by_priority.items():
                submit_s = next((e[0] for e in entries if e[1] not in gone), math.inf)
                if submit_s < first.get(tenant, math.inf):
                    first[tenant] = submit_s
            shortest = (next((e[2].job for e in entries if e[1] not in gone), None)
                        for entries in index.by_kind.values())
            return claimants_of((job for job in shortest if job is not None), first)
        return from_index

    def _special_indexed(self, index: PendingIndex, decided: set[str]) -> tuple[
            Callable[[], list[PendingJob]], Callable[[], set[str]],
            list[tuple[Hashable, list[tuple[float, str, PendingJob]], Wait]] | None]:
        """`_skipped`'s special jobs and their ids (each built only if asked for) from the kept queue, and when
        none of them can start or backfill now, their waits: per kind of job, its short jobs (a prefix, decided
        ones included: they keep their own waits) and their wait; else None. One question per kind of job
        (only the shortest of a kind could backfill where the others cannot), not per job."""
        now_s, latest_s = self.now_s, self._latest_reserved_start_s
        held = [index.by_job_id[j] for j in self.held_for if j in index.by_job_id and j not in decided]
        short = list(index.short_enough(now_s, latest_s))  # (kind, its jobs shortest first, how many are short)

        def special() -> list[PendingJob]:
            return [index.by_job_id[job_id] for job_id in special_ids()]

        def special_ids() -> set[str]:
            ids = {e[1] for _, entries, count in short for e in itertools.islice(entries, count)}
            ids -= decided
            ids.update(p.job.job_id for p in held)
            return ids

        if held or any(self._is_short(index, job_id, decided) for job_id in self.stopping_for):
            return special, special_ids, None  # a job with victims or held nodes of its own is decided on its own
        verdicts: list[tuple[Hashable, list[tuple[float, str, PendingJob]], Wait]] = []
        for kind, entries, count in short:
            first = 0
            while first < count and entries[first][1] in decided:
                first += 1
            if first == count:
                continue
            item = entries[first][2]  # the shortest of its kind: if it cannot backfill, none of its kind can
            wait = self.wait_alike(item, self.models_for(item.job))
            if wait is None:
                return special, special_ids, None
            verdicts.append((kind, entries[:count], wait))
        return special, special_ids, verdicts

    def _is_short(self, index: PendingIndex, job_id: str, decided: set[str]) -> bool:
        """Whether `job_id` waits undecided and is short enough to backfill reserved nodes."""
        item = index.by_job_id.get(job_id)
        return item is not None and job_id not in decided and \
            self.now_s + item.job.duration_s <= self._latest_reserved_start_s

    def _skipped(self, pending: tuple[PendingJob, ...], decided: set[str]) -> tuple[dict[str, Wait], list[PendingJob]]:
        """Once the cluster is full: a capacity wait for each job not decided yet (in the snapshot's order),
        and those of them that may still start (holding nodes, or short enough to backfill reserved nodes)."""
        latest_s, now_s = self._latest_reserved_start_s, self.now_s
        held_for = self.held_for
        wait = self.wait  # remembered per kind of job, so thousands of skipped jobs share a few waits
        special: list[PendingJob] = []
        waits: dict[str, Wait] = {}
        for item in pending:
            job = item.job
            job_id = job.job_id
            if job_id in decided:
                continue
            if now_s + job.duration_s <= latest_s or job_id in held_for:
                special.append(item)
            waits[job_id] = wait(job, WaitReason.CAPACITY)
        return waits, special
