"""Whether the cluster has slack for the energy levers to spend: its GPUs not in use cover the warm reserve.

Capping and sleep spend the same thing. A node put to sleep is a free GPU taken out of reach for a
boot; a capped job holds its GPUs longer (a 5% slowdown is 5% more GPU-time), so its GPUs come free
later. Both cost nothing while the cluster has room to spare and turn into queue time once it
fills. The warm reserve (`warm_reserve_target_gpus`: a fixed floor and a share of the GPUs in use; the
forecast's hourly rise is left out here, see `levers_have_slack`) is the policy's own statement of the
burst the cluster must be able to take at once.
When the GPUs not in use no longer cover it, there is no slack left: the caps lift on every job, as
they do for the jobs in a waiting job's way (greengpu.sched.slack), and the reserve already keeps
every free node awake.

Why not wait for a queue: a cap's cost outlives the cap. A job capped for days is hours behind when
the cluster fills, and lifting its cap then does not give those hours back: on the public Philly
trace, the jobs capped while the cluster approached full made its peaks queue longer (p99 wait 948 s
against 631 s uncapped) and, on a saturated 640-GPU cluster, lengthened the p95 wait by 11%.
"""

from __future__ import annotations

from greengpu.policy import SleepPolicy
from greengpu.sleep.suspends import warm_reserve_target_gpus


def levers_have_slack(total_gpus: float, busy_gpus: float, policy: SleepPolicy,
                      arrived_gpus: float | None = None) -> bool:
    """True while the GPUs not in use (awake or asleep) cover the warm reserve the policy asks for.

    `total_gpus` counts the cluster's GPUs (awake, asleep or booting); the reserve is the sleep lever's
    fixed floor and share of use (its settings apply even where sleep is off: they are the site's
    statement of the bursts to expect). The forecast's hourly rise is left out: it is about waking
    nodes before a ramp, and a body without a forecast must reach the same verdict. `arrived_gpus` is the
    reserve's (greengpu.sleep.arrivals): a cluster that only drains what it holds keeps no reserve, so
    its caps stay on."""
    return total_gpus - busy_gpus >= warm_reserve_target_gpus(policy, busy_gpus, arrived_gpus=arrived_gpus)
