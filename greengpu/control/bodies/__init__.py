"""What the daemon needs of a cluster (`body.ClusterBody`) and the bodies for Slurm and Kubernetes: they
translate observations and actions, they never decide."""
