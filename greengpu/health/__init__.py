"""GPU health: fault-risk scores from NVML signals (pure: no I/O, no clock; docs/HEALTH.md)."""
