"""The upkeep of the lending rule's kept answers (greengpu.sched.claims_kept): what each start, stop, promise and
release since the last question changed, which claimants may reclaim on each model, and the nodes with a job a
claimant might take back."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping

from greengpu.model import Job, RunningJob
from greengpu.sched.claimants import ClaimantFinder, ClaimantNeeds, Profile, QueueByTenant
from greengpu.sched.claims import Claimant
from greengpu.sched.quota import QuotaLedger
from greengpu.sched.state import PlacementState


class ClaimsUpkeep:
    """What KeptClaims keeps between starts, and how it is brought up to date (see greengpu.sched.claims_kept)."""

    def __init__(self, state: PlacementState, ledger: QuotaLedger, queue: QueueByTenant,
                 may_reclaim: Callable[[Job, str], bool], running_on_node: Mapping[int, Mapping[str, RunningJob]],
                 started: list[RunningJob], stopping: set[str], changes: Callable[[], Hashable],
                 running_by_id: Mapping[str, RunningJob], promised: Mapping[tuple[str, str], int]) -> None:
        self.state = state
        self.ledger = ledger
        self._running_on_node = running_on_node
        self._started = started
        self._stopping = stopping
        self._changes = changes
        """Moves when a job is asked to stop, GPUs are promised to a reclaim or GPUs are released (`_follow`)."""
        self._running_by_id = running_by_id
        self._promised = promised
        """Milli-GPUs promised to tenants' waiting jobs by this cycle's preemptions, per (tenant, quota key)."""
        self._seen_stopping = set(stopping)
        self._seen_promised = dict(promised)
        self._log_epoch, self._log_at = state.changes.epoch, len(state.changes.nodes)
        """Where the free-GPU index's change log was last read (greengpu.sched.state.ChangeLog)."""
        self._model_at = {model: at for at, model in enumerate(state.models)}
        self._gone: set[str] = set()
        """The waiting jobs the cycle started (no longer claimants)."""
        self._gone_tenants: set[str] = set()
        """Their tenants."""
        self._finder = ClaimantFinder(queue, self._gone, state.models, may_reclaim, self._gone_tenants)
        self._started_on_node: dict[int, list[RunningJob]] = {}
        self._seen_started = 0
        self._token: Hashable = changes()
        self._as_of: tuple[int, Hashable] = (0, self._token)
        self._profiles: dict[str, Profile] | None = None
        self._active: dict[str, dict[str, Claimant]] | None = None
        """Per model, the claimants that may reclaim on it, by tenant."""
        self._needs: dict[str, ClaimantNeeds] | None = None
        """Per model, what the claimants that may reclaim on it need (kept with _active)."""
        self._over_seen: dict[str, tuple[bool, ...]] = {}
        """Per tenant whose running jobs an answer looked at: whether it is above nominal quota, per model."""
        self._takeable: dict[str, set[int]] | None = None
        """Per model, nodes with a running job some claimant might take back (a superset: see _takeable_by_model)."""
        self._interruptible_nodes: dict[str, set[int]] = {}
        """Per tenant, the nodes of its running jobs that may be stopped (kept with _takeable)."""
        self.claims_version = 0
        self.over_version = 0
        self._node_version: dict[int, int] = {}
        self._kept: dict[tuple[int, str], tuple[tuple[int, int, int], bool]] = {}
        self._sets: dict[tuple[str, tuple[str, ...]], set[int]] = {}
        """owed_nodes' answers, until anything changes."""
        self._everywhere: dict[tuple[str, tuple[str, ...]], bool] = {}
        """owed_everywhere's answers, until anything changes."""
        self._everywhere_by_needs: dict[tuple[object, ...], bool] = {}
        self._everywhere_most: dict[tuple[str, ...], tuple[frozenset[str], bool]] = {}
        """Per models: the tenants whose claimants' needs set them apart, and the answer of every other tenant."""
        """The same answers by what they read of the claimants (every tenant but the claimants' own reads the same)."""

    # ------------------------------------------------------------------ upkeep

    def _refresh(self) -> None:
        """Bring what is kept up to date with the cycle's starts and other changes since the last question."""
        as_of = (len(self._started), self._changes())
        if as_of == self._as_of:
            return
        self._as_of = as_of
        self._sets.clear()
        self._everywhere.clear()
        self._everywhere_by_needs.clear()
        self._everywhere_most.clear()
        new = self._started[self._seen_started:]
        self._seen_started = len(self._started)
        index = self.state.index
        for running in new:
            self._gone.add(running.job.job_id)
            self._gone_tenants.add(running.job.tenant)
            for name in running.nodes:
                where = index.get(name)
                if where is not None:
                    self._started_on_node.setdefault(where, []).append(running)
                    self._node_version[where] = self._node_version.get(where, 0) + 1
        if as_of[1] != self._token and not self._follow(as_of[1]):
            self._forget_all(as_of[1])
            return
        for running in new:
            self._note_takeable(running)
        by_tenant: dict[str, list[Job]] = {}
        for running in new:
            by_tenant.setdefault(running.job.tenant, []).append(running.job)
        for tenant, jobs in by_tenant.items():
            self._retake_tenant(tenant, jobs)

    def _follow(self, token: Hashable) -> bool:
        """Bring what is kept up to date with jobs asked to stop, GPUs promised and GPUs released since the last
        look: the nodes whose free GPUs or jobs changed, and the tenants whose quota standing or reclaims did (the
        victims' tenants, and the tenants promised GPUs). False when that cannot be told (drop everything)."""
        log = self.state.changes
        if log.epoch != self._log_epoch:
            return False
        affected: set[str] = set()
        touched = list(log.nodes[self._log_at:])
        for job_id in self._stopping - self._seen_stopping:
            victim = self._running_by_id.get(job_id)
            if victim is None:
                return False
            affected.add(victim.job.tenant)
            index = self.state.index
            touched.extend(index[name] for name in victim.nodes if name in index)
        for key, units in self._promised.items():
            if self._seen_promised.get(key) != units:
                affected.add(key[0])
        self._token = token
        self._seen_stopping = set(self._stopping)
        self._seen_promised = dict(self._promised)
        self._log_at = len(log.nodes)
        versions = self._node_version
        for node in touched:
            versions[node] = versions.get(node, 0) + 1
        for tenant in affected:
            self._retake_tenant(tenant, [])
        return True

    def _forget_all(self, token: Hashable) -> None:
        log = self.state.changes
        self._log_epoch, self._log_at = log.epoch, len(log.nodes)
        self._seen_stopping = set(self._stopping)
        self._seen_promised = dict(self._promised)
        self._token = token
        self._profiles = None
        self._active = None
        self._needs = None
        self._takeable = None
        self._interruptible_nodes.clear()
        self._over_seen.clear()
        self._kept.clear()
        self.claims_version += 1
        self.over_version += 1

    def _retake_tenant(self, tenant: str, started: list[Job]) -> None:
        """Jobs of `tenant` started: its claimant and its standing above nominal quota may have changed."""
        if self._profiles is not None:
            before = self._profiles.get(tenant)
            after: Profile | None
            if before is None:
                after = self._finder.profile_of(tenant)
            else:
                claimant = before[0]
                smallest_left = all(job is not claimant.job for job in started)
                oldest_left = all(job.submit_time_s > claimant.first_submit_s for job in started)
                if smallest_left and oldest_left:  # only where it may reclaim can have changed
                    after = self._finder.with_models(claimant)
                elif smallest_left:  # its oldest waiting job started: only its age changed
                    after = self._finder.with_models(Claimant(claimant.job, self._finder.first_submit_s(tenant)))
                else:
                    after = self._finder.profile_of(tenant)
            if after is None:
                self._profiles.pop(tenant, None)
            else:
                self._profiles[tenant] = after
            if (before[2] if before is not None else None) != (after[2] if after is not None else None):
                self.claims_version += 1
                if self._active is not None and self._needs is not None:
                    if before is not None:
                        for model in before[1]:
                            del self._active[model][tenant]
                            self._needs[model].remove(tenant, before[0].job)
                    if after is not None:
                        claimant, models, _ = after
                        for model in models:
                            self._active[model][tenant] = claimant
                            self._needs[model].add(tenant, claimant.job)
        seen = self._over_seen.get(tenant)
        if seen is not None:
            now = self._over_flags(tenant)
            if now != seen:
                self._over_seen[tenant] = now
                self.over_version += 1
                if self._takeable is not None:  # its jobs may be taken back now
                    self._add_takeable(tenant, self._interruptible_nodes.get(tenant, ()))

    def _over_flags(self, tenant: str) -> tuple[bool, ...]:
        ledger = self.ledger
        return tuple(ledger.over_nominal_units(tenant, model) > 0 for model in self.state.models)

    def _is_over(self, tenant: str, model: str) -> bool:
        flags = self._over_seen.get(tenant)
        if flags is None:
            flags = self._over_seen[tenant] = self._over_flags(tenant)
        return flags[self._model_at[model]]

    def _note_takeable(self, running: RunningJob) -> None:
        """A started job that may be stopped: its nodes hold a job a claimant may take back once its tenant is
        above nominal quota."""
        if self._takeable is None or not running.job.interruptible:
            return
        index = self.state.index
        nodes = {index[name] for name in running.nodes if name in index}
        self._interruptible_nodes.setdefault(running.job.tenant, set()).update(nodes)
        self._add_takeable(running.job.tenant, nodes)

    def _add_takeable(self, tenant: str, nodes: Iterable[int]) -> None:
        assert self._takeable is not None
        model_of = self.state.model
        for node in nodes:
            if self._is_over(tenant, model_of[node]):
                self._takeable[model_of[node]].add(node)

    def _takeable_by_model(self) -> dict[str, set[int]]:
        """Nodes where a claimant might take a job back: a running job that may be stopped and is not stopping, of
        a tenant above nominal quota. Starts only add to it until something drops everything kept, so it is kept
        as a superset (a node that no longer qualifies is judged exactly, and found not owed by a take-back)."""
        if self._takeable is None:
            tenant_nodes: dict[str, set[int]] = {}
            for node, jobs in self._running_on_node.items():
                for running in jobs.values():
                    if running.job.interruptible and running.job.job_id not in self._stopping:
                        tenant_nodes.setdefault(running.job.tenant, set()).add(node)
            for node, started in self._started_on_node.items():
                for running in started:
                    if running.job.interruptible:
                        tenant_nodes.setdefault(running.job.tenant, set()).add(node)
            self._takeable = {model: set() for model in self.state.models}
            self._interruptible_nodes = tenant_nodes
            for tenant, nodes in tenant_nodes.items():
                self._add_takeable(tenant, nodes)
        return self._takeable

    # ------------------------------------------------------------------ claimants

    def _active_by_model(self) -> dict[str, dict[str, Claimant]]:
        if self._profiles is None:
            profiles: dict[str, Profile] = {}
            for tenant in self._finder.tenants():
                found = self._finder.profile_of(tenant)
                if found is not None:
                    profiles[tenant] = found
            self._profiles = profiles
            self._active = None
        if self._active is None or self._needs is None:
            active: dict[str, dict[str, Claimant]] = {m: {} for m in self.state.models}
            needs = {m: ClaimantNeeds() for m in self.state.models}
            for tenant, (claimant, models, _) in self._profiles.items():
                for model in models:
                    active[model][tenant] = claimant
                    needs[model].add(tenant, claimant.job)
            self._active = active
            self._needs = needs
        return self._active

    def _others(self, model: str, tenant: str) -> tuple[int | None, bool, int | None]:
        """Of the claimants of tenants other than `tenant` that may reclaim on `model`: the smallest whole-GPU
        need, whether one's need is capped by the node's size, and the smallest fractional request."""
        self._active_by_model()
        assert self._needs is not None
        return self._needs[model].others(tenant)

    def _others_of_most(self, model: str) -> tuple[frozenset[str], tuple[int | None, bool, int | None]]:
        """`_others` as every tenant but the returned few reads it (ClaimantNeeds.most)."""
        self._active_by_model()
        assert self._needs is not None
        return self._needs[model].most()

    # ------------------------------------------------------------------ answers
