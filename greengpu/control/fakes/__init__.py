"""The fake cluster (GPUs, MIG, jobs, cloud, job pace) that `greengpu daemon --backend fake` and the tests run."""
