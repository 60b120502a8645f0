"""The scheduler hooks: Slurm's SuspendProgram and ResumeProgram, the Kubernetes sleep commands, the node-local
suspend endpoint, and the sleep state they share (docs/SLEEP.md)."""
