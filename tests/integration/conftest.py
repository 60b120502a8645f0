"""Fixtures shared by the integration tests: the real Slurm cluster of test_slurm_power_save.py."""

from test_slurm_power_save import slurm_cluster  # noqa: F401 - a fixture, found by its name
