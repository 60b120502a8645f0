"""Checkpoint-aware preemption: the smallest set of eligible victims that lets a pending job fit.

A running job may be a victim of pending job J only if all of these hold:
- it can be interrupted, has run at least `min_runtime_s`, was preempted fewer than
  `max_per_job_per_hour` times in the last hour, and is not already being stopped;
- it did not itself preempt J before (no ping-pong);
- either it belongs to J's tenant and has lower priority, or its tenant is above its nominal
  quota (borrowing) and J has higher priority or J's tenant is reclaiming its own nominal quota.

Quotas are counted net of preemptions already under way (a victim keeps its GPUs, and its job's
tenant keeps them on the books, until its checkpoint grace runs out): a lender is never pushed
below its nominal quota by all the evictions in flight together, and a tenant reclaims only while
its running jobs, plus the jobs that already have victims stopping for them, plus J fit inside its
nominal quota. Without this, every search during a grace saw the same surplus: two reclaims each
took a lender's last borrowed GPUs (leaving it under its quota, so it reclaimed from a third
tenant in turn), and a tenant with a few GPUs of quota left stopped a victim for each of dozens of
waiting one-GPU jobs, ending far above its quota and the first to be reclaimed from in turn.

Victims are ranked by priority, then by the work they would lose (GPU-seconds since their last
checkpoint) or, for comparison, newest first. Gangs are evicted whole: a victim frees every slot
it holds, and the work it would lose is counted on all of its GPUs. The chosen set is pruned until
removing any victim would stop J from fitting.

A reclaim must be worth its cost (`reclaim_pays`). When J takes a set as quota (it does not outrank
every victim by priority), the set is stopped only if the work it destroys, the victims' GPU-seconds
since their last checkpoints (a gang's on all its GPUs), is less than what J gains: its GPUs times how
much sooner it starts than if it waited for the GPUs that free up on their own, less the checkpoint
grace it waits either way. Without preemption J would start once (a) the running jobs' expected ends
free GPUs in the shape it needs, and (b) the GPUs freed in all have served the jobs waiting since
before J (older jobs go first: the age boost), whichever is later. So a one-GPU job does not stop a
32-GPU gang hours old when a GPU frees up within the hour, and nobody is stopped for GPUs that free up
within the grace; under sustained overload, where the queue ahead takes every GPU that frees up, J
still reclaims. The quota guarantee keeps a bound: J reclaims whatever it costs once its GPUs, waiting
since its submission, have missed as much GPU-time as its victims had unsaved when it was submitted
(at once for victims that started after it came: they took GPUs its quota guaranteed). Inference and
interactive jobs, and jobs with a deadline, are not weighed: their wait is what they are judged by.

The package, one module a part: `rules` (lost work, victim order, when a node fits on its own), `eligibility`
(who may yield and the quota books of preemptions under way), `cheapest_set` (priority preemption and quota
reclaim: the cheapest set across the cluster), `own_quota` (a tenant's higher-priority job over its own jobs),
`reclaim_worth` (whether a reclaim pays) and `finder` (`VictimFinder`, the one object a cycle asks).
"""

from greengpu.sched.preemption.eligibility import running_by_tenant
from greengpu.sched.preemption.finder import VictimFinder
from greengpu.sched.preemption.rules import (
    HOUR_S,
    WAIT_SENSITIVE_CLASSES,
    VictimChoice,
    free_after_s,
    last_checkpoint_s,
    lost_gpu_s,
    victim_rank,
)

__all__ = ["HOUR_S", "WAIT_SENSITIVE_CLASSES", "VictimChoice", "VictimFinder", "free_after_s", "last_checkpoint_s",
           "lost_gpu_s", "running_by_tenant", "victim_rank"]
