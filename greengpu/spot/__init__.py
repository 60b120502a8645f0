"""Lever 3: spot versus on-demand cloud capacity.

`decide.py` holds the pure decisions (which kind of capacity a job may use, the expected cost of
running it on spot, Uniform Progress towards a deadline); `pod_facts.py` and `admission.py` turn a
Kubernetes pod into those facts and the decision into an admission answer. Bodies (the simulator's
cloud pools, the live Slurm and Kubernetes parts) carry them out.
"""
