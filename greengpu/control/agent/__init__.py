"""The node agent: its command wiring, its tick over the node's GPUs, its journal, job classes, health watch,
Prometheus exporter and reports to the daemon (docs/AGENT.md)."""
