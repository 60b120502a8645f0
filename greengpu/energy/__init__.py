"""Shared energy physics: GPU power curves, power models, and how fast a job runs under a setting. Pure: no I/O."""
