"""Lever 1, power capping: the per-GPU limit and clock decision (`cap_decision`) and the tick's power actions
from what a body observes of each GPU (`gpu_power`). Pure: no I/O."""
