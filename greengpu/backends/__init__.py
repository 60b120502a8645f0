"""Real I/O adapters (NVML, Wake-on-LAN, IPMI, Slurm, Kubernetes). Thin: they translate, never decide."""
