"""How a cloud job stops before its end: a spot node's interruption and the moves at its periodic checkpoints.

An interruption gives `spot.notice_s` of notice: a job that checkpoints and can write one within the notice stops
`checkpoint_cost_s` later with all its work saved; any other job runs until the node is taken back and loses the
work since its last periodic checkpoint (or all of it). At a periodic checkpoint a deadline job on spot moves off
it when Uniform Progress says so (`leaves_spot`), and a job comes back on-premises when room is free there and
the move pays (`comes_back`). Every stopped job is requeued with the rest of its work (sim/cloud.py holds the
nodes and jobs; this part only decides and schedules the stops).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from greengpu.model import Job, PendingJob, Pool
from greengpu.sim.clock import EventKind
from greengpu.sim.cloud_parts import CloudJob
from greengpu.spot.decide import leaves_spot
from greengpu.spot.wait_or_rent import ComeBackFacts, comes_back

if TYPE_CHECKING:
    from greengpu.sim.cloud import CloudPools


class CloudStops:
    """The interruptions and checkpoint moves of the jobs in a replay's cloud pools."""

    def __init__(self, pools: CloudPools) -> None:
        self.pools = pools

    def next_checkpoint(self, cloud_job: CloudJob, now_s: float) -> None:
        """A job is decided again at its next periodic checkpoint (before its end): a deadline job on spot
        (Uniform Progress) and, with `come_back`, any job that checkpoints (it may return on-premises)."""
        job = cloud_job.pending.job
        interval = job.checkpoint_interval_s
        if not interval or cloud_job.start_s is None:
            return
        spot = self.pools.policy.spot
        deadline_on_spot = cloud_job.kind == "spot" and job.deadline_s is not None
        if not (deadline_on_spot or (spot.enabled and spot.come_back)):
            return
        at_s = now_s + interval
        if at_s < cloud_job.start_s + job.duration_s:
            self.pools.clock.push(at_s, EventKind.CLOUD, ("checkpoint", job.job_id, cloud_job.token))

    def checkpoint(self, cloud_job: CloudJob) -> None:
        """A periodic checkpoint: a deadline job moves off spot here when rule 4 says so, and a job comes back
        on-premises when room is free there and the move pays; else it runs on to its next one."""
        pools = self.pools
        now_s = pools.clock.now_s
        job = cloud_job.pending.job
        assert cloud_job.start_s is not None
        ran_s = now_s - cloud_job.start_s
        pool = pools.pools[pools.nodes[next(iter(cloud_job.units_by_node))].pool]
        left = replace(job, duration_s=job.duration_s - ran_s)
        facts = pools.chooser.facts(left, now_s)
        if cloud_job.kind == "spot" and leaves_spot(facts, pools.chooser.price(job, pool), pools.policy.spot):
            pools.moves.append((job.job_id, now_s))
            back = False
        elif self._comes_back(left, facts.deadline_remaining_s, pool):
            pools.come_backs.append((job.job_id, now_s))
            back = True
        else:
            self.next_checkpoint(cloud_job, now_s)
            return
        cloud_job.saved_s = ran_s  # the checkpoint just written: nothing is lost
        self.stop(cloud_job, counted=not back)

    def _comes_back(self, left: Job, deadline_remaining_s: float | None, pool: Pool) -> bool:
        pools = self.pools
        spot = pools.policy.spot
        if not (spot.enabled and spot.come_back):
            return False
        facts = ComeBackFacts(left.job_class, left.gpus, left.duration_s, pools.chooser.gpu_price(pool),
                              pools.fits_on_premises(left), spot.restart_s,
                              pools.chooser.on_demand_per_gpu_hour(left), deadline_remaining_s)
        return comes_back(facts, spot.waiting)

    def notice(self, name: str) -> None:
        """A spot interruption's notice: checkpoint if the notice allows it, else run until taken back."""
        pools = self.pools
        node = pools.nodes.get(name)
        if node is None:
            return  # released before its interruption came
        now_s = pools.clock.now_s
        spot = pools.policy.spot
        node.reclaim_s = now_s + spot.notice_s
        pools.figures[node.pool].interruptions += 1
        for job_id in sorted(node.jobs):
            cloud_job = pools.jobs[job_id]
            job = cloud_job.pending.job
            if cloud_job.start_s is None:  # still waiting for its nodes: back to the queue, nothing lost
                pools.leave(cloud_job)
                pools.requeue(cloud_job.pending)
                continue
            cloud_job.token += 1
            pools.tokens[job_id] = cloud_job.token
            end_s = cloud_job.start_s + job.duration_s
            cost_s = spot.checkpoint_cost_s
            if job.checkpoint_interval_s and cost_s <= spot.notice_s:
                cloud_job.saved_s = now_s - cloud_job.start_s
                stop_s = now_s + cost_s
            else:
                stop_s = node.reclaim_s
            what = "finish" if end_s <= stop_s else "stop"
            pools.clock.push(min(end_s, stop_s), EventKind.CLOUD, (what, job_id, cloud_job.token))
        pools.clock.push(node.reclaim_s, EventKind.CLOUD, ("reclaim", name, 0))

    def stop(self, cloud_job: CloudJob, counted: bool = True) -> None:
        """An interrupted job stops: requeued with the work saved by its checkpoint taken off. `counted`: it
        counts as a preemption (a move back on-premises at a checkpoint does not: nothing was taken from it)."""
        pools = self.pools
        now_s = pools.clock.now_s
        job = cloud_job.pending.job
        assert cloud_job.start_s is not None
        saved_s = cloud_job.saved_s
        if saved_s is None:  # no checkpoint in the notice: the work since the last periodic one is lost
            ran_s = now_s - cloud_job.start_s
            interval = job.checkpoint_interval_s
            saved_s = math.floor(ran_s / interval) * interval if interval else 0.0
            lost_s = ran_s - saved_s
            pool = pools.nodes[next(iter(cloud_job.units_by_node))].pool
            pools.figures[pool].lost_gpu_s += lost_s * job.gpus
        pools.leave(cloud_job, release_idle=not counted)
        pools.preemptions += counted
        remaining = replace(job, duration_s=max(1.0, job.duration_s - saved_s))
        pools.requeue(PendingJob(remaining, preemptions=cloud_job.pending.preemptions))
