"""What the trace formats are (docs/TRACES.md): their names, the canonical columns, and Slurm QOS names
as priorities.

Shared by the exact reader (traces.py) and the vectorised one (fast_traces.py), so neither imports
the other for them.
"""

from __future__ import annotations

TRACE_FORMATS = ("csv", "philly", "sacct")
CANONICAL_REQUIRED = ("job_id", "submit_time", "duration_s", "gpus", "tenant")
QOS_PRIORITY = {"low": -10, "scavenger": -20, "normal": 0, "standard": 0, "high": 10, "urgent": 20, "debug": 5}
"""Slurm QOS name to greengpu priority; other names get 0."""
