"""Lever 1, power capping: the per-GPU limit and clock decision (`cap_decision`), the tick's power actions
from what a body observes of each GPU (`gpu_power`), and the rule that prices a cap in the occupancy it adds
on the demand forecast (`occupancy`, `demand_forecast`, `forecast_caps`). Pure: no I/O."""
