"""The lending rule's answers kept from one start to the next: those of greengpu.sched.claims.Claims (the reference,
used by `schedule_cycle(incremental=False)`) for the cost of what changed (docs/SCHEDULER.md, "Many tenants").

A start changes the free GPUs and jobs of its nodes (each node's kept answers carry the node's version) and its
own tenant's claimant and quota standing (when either differs, every kept answer is found again:
`claims_version`, `over_version`). Jobs asked to stop, GPUs promised and GPUs released are followed from the
victims, the promises and the free-GPU index's change log (`_follow`). Whole owed sets come from the free-GPU
buckets (the smallest need among the other tenants' claimants decides which); only nodes with a job a claimant
could take back are judged one by one. `owed_everywhere` tells when a borrower could start nowhere.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from greengpu.model import GPU_UNITS, RunningJob
from greengpu.sched.claims import Claimant
from greengpu.sched.claims_upkeep import ClaimsUpkeep


class KeptClaims(ClaimsUpkeep):
    """Which nodes are owed to claimants, kept between starts (see the module docstring)."""

    def owed_to_others(self, node: int, tenant: str) -> bool:
        """Whether `node` is owed to a claimant of a tenant other than `tenant` (greengpu.sched.claims.Claims)."""
        self._refresh()
        active = self._active_by_model()  # brings the versions up to date first
        stamp = (self.claims_version, self.over_version, self._node_version.get(node, 0))
        kept = self._kept.get((node, tenant))
        if kept is not None and kept[0] == stamp:
            return kept[1]
        found = self._owed_now(node, tenant, active[self.state.model[node]].values())
        self._kept[(node, tenant)] = (stamp, found)
        return found

    def owed_nodes(self, tenant: str, models: tuple[str, ...]) -> set[int]:
        """The nodes of `models` with free GPUs that are owed to claimants of tenants other than `tenant`: the
        nodes where another claimant fits on the free GPUs alone (unions of the free-GPU buckets), and those of
        the nodes with a job a claimant could take back where it fits once it has (judged one by one)."""
        self._refresh()
        key = (tenant, models)
        found = self._sets.get(key)
        if found is not None:
            return found
        state = self.state
        owed: set[int] = set()
        for model in models:
            if model not in state.buckets:
                continue
            need, capped, units = self._others(model, tenant)
            buckets = state.buckets[model]
            if need is not None:
                if need <= 0:
                    owed |= state.nodes_with_free_gpus(model)
                for bucket in buckets[need:]:
                    owed |= bucket
            if capped:  # min(its GPUs, the node's size): any node with every GPU free
                for nodes in state.whole_by_domain[model].values():
                    owed |= nodes
            if units is not None:  # a whole free GPU takes any share
                for bucket in buckets[1:]:
                    owed |= bucket
                shared = state.shared[model]
                owed.update(node for _, node, _ in shared[bisect_left(shared, (units, -1, -1)):])
            takeable = self._takeable_by_model()[model]
            if takeable:
                for node in takeable & state.nodes_with_free_gpus(model):
                    if node not in owed and self.owed_to_others(node, tenant):
                        owed.add(node)
        self._sets[key] = owed
        return owed

    def owed_everywhere(self, tenant: str, models: tuple[str, ...]) -> bool:
        """True when every node of `models` with free GPUs is owed to another tenant's claimant on its free GPUs
        alone (so a borrower of `tenant` could start nowhere); False when that is not so or not shown that way."""
        self._refresh()
        key = (tenant, models)
        found = self._everywhere.get(key)
        if found is None:
            # The answer reads the tenant only through the other tenants' claimants' needs: all but a few tenants
            # (those with the smallest claimants) read the same needs and share one answer, so a thousand tenants
            # cost one answer per start, not a thousand.
            few, found = self.owed_everywhere_by_most(models)
            if tenant in few:
                buckets = self.state.buckets
                found = self._by_needs(tuple((model, self._others(model, tenant)) for model in models
                                             if model in buckets))
            self._everywhere[key] = found
        return found

    def owed_everywhere_by_most(self, models: tuple[str, ...]) -> tuple[frozenset[str], bool]:
        """`owed_everywhere`'s answer for every tenant but the returned few (whose answers may differ), kept until
        anything changes."""
        self._refresh()
        most = self._everywhere_most.get(models)
        if most is None:
            most = self._everywhere_most[models] = self._everywhere_of_most(models)
        return most

    def _everywhere_of_most(self, models: tuple[str, ...]) -> tuple[frozenset[str], bool]:
        """The tenants that read other claimants' needs on `models` than the rest, and the rest's answer."""
        few: set[str] = set()
        needs = []
        for model in models:
            if model in self.state.buckets:
                apart, others = self._others_of_most(model)
                few |= apart
                needs.append((model, others))
        return frozenset(few), self._by_needs(tuple(needs))

    def _by_needs(self, needs: tuple[tuple[str, tuple[int | None, bool, int | None]], ...]) -> bool:
        found = self._everywhere_by_needs.get(needs)
        if found is None:
            found = self._everywhere_by_needs[needs] = self._owed_everywhere(needs)
        return found

    def _owed_everywhere(self, needs: tuple[tuple[str, tuple[int | None, bool, int | None]], ...]) -> bool:
        state = self.state
        for model, (need, _, units) in needs:
            buckets = state.buckets[model]
            if units is None:
                fewest = next((gpus for gpus in range(1, len(buckets)) if buckets[gpus]), None)
                if fewest is not None and (need is None or need > fewest):
                    return False  # a node with fewer free GPUs than any other claimant needs
            shared = state.shared[model]
            if shared:  # GPUs partly free: a node with no whole free GPU takes only a small enough share
                most: dict[int, int] = {}
                for free, node, _ in shared:
                    if not state.free_whole[node]:
                        most[node] = max(free, most.get(node, 0))
                if most and (units is None or min(most.values()) < units):
                    return False
        return True

    def _owed_now(self, node: int, tenant: str, claimants: Iterable[Claimant]) -> bool:
        """Claims._owed_now over the claimants that may reclaim on the node's model."""
        state = self.state
        free_whole = state.free_whole[node]
        most_free = max(state.gpu_free[node], default=0)
        size = state.size[node]
        model = state.model[node]
        # The running jobs some claimant could take back at no cost (of a tenant above nominal quota, that may be
        # stopped and is not stopping already); which of them one claimant may take depends on its tenant and age.
        takeable = [running for running in self._jobs_on(node)
                    if running.job.interruptible and running.job.job_id not in self._stopping
                    and self._is_over(running.job.tenant, model)]
        for claimant in claimants:
            job = claimant.job
            if job.tenant == tenant:
                continue
            need = 0
            if job.is_fractional:
                if most_free >= job.units:
                    return True
            else:
                need = min(job.whole_gpus, size) if job.gpus_per_node is None else job.gpus_per_node
                if free_whole >= need:
                    return True
            if takeable and self._fits_once_reclaimed(node, claimant, takeable, need):
                return True
        return False

    def _fits_once_reclaimed(self, node: int, claimant: Claimant, takeable: list[RunningJob], need: int) -> bool:
        job = claimant.job
        state = self.state
        free = list(state.gpu_free[node])
        name = state.names[node]
        added = False
        for running in takeable:
            if running.job.tenant == job.tenant or running.start_time_s < claimant.first_submit_s:
                continue
            added = True
            for slot in running.slots:
                if slot.node == name:
                    free[slot.gpu_index] += slot.units
        if not added:
            return False  # the free GPUs alone were judged already
        if job.is_fractional:
            return any(f >= job.units for f in free)
        return sum(1 for f in free if f >= GPU_UNITS) >= need

    def _jobs_on(self, node: int) -> Iterable[RunningJob]:
        there = self._running_on_node.get(node, {})
        started = self._started_on_node.get(node)
        return [*there.values(), *started] if started else there.values()
