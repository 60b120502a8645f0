"""The scheduling core: queue order, quotas, placement, gangs, preemption, fair share. Pure: no I/O."""
