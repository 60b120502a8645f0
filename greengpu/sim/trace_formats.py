"""What the trace formats are (docs/TRACES.md): their names, the canonical columns and the shared profiles
(Slurm QOS names as priorities: greengpu.slurm_json.QOS_PRIORITY).

Shared by the exact reader (traces.py) and the vectorised one (fast_traces.py), so neither imports
the other for them.
"""

from __future__ import annotations

from greengpu.model import TIMESLICE
from greengpu.sched.mig import ALL_PROFILES

TRACE_FORMATS = ("csv", "philly", "sacct")
CANONICAL_REQUIRED = ("job_id", "submit_time", "duration_s", "gpus", "tenant")
SHARED_PROFILES = ALL_PROFILES | {TIMESLICE}
"""The values of the optional `gpu_profile` column: a MIG profile (one instance) or `timeslice` (one replica of a
time-sliced GPU); empty: whole GPUs or an MPS-style fraction (docs/GPU-SHARING.md)."""
