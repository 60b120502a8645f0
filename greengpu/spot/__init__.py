"""Lever 3: spot versus on-demand cloud capacity.

`decide.py` holds the pure decisions (which kind of capacity a job may use, the expected cost of
running it on spot, Uniform Progress towards a deadline); bodies (the simulator's cloud pools, the
live Slurm and Kubernetes parts) carry them out.
"""
