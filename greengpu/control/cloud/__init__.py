"""The cloud and spot services: Slurm cloud nodes launched and released, the spot steer and the admission
webhook (docs/SPOT-LIVE.md)."""
