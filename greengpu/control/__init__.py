"""The programs that run the core on live clusters: the daemon, its cluster bodies, the node agent, the scheduler
hooks, the cloud and spot services, and the fake cluster the daemon and the tests run."""
