"""The brain: the control tick, one pure decision over every lever, shared by the simulator, the agent, the sleep
commands and the daemon (docs/ARCHITECTURE.md).

A body observes its cluster, builds the tick's inputs with the builders here (one per lever, so the
same observation gives the same decision in every body), and carries out the actions it gets back.
"""
