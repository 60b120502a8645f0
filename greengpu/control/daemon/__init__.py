"""The daemon: its command wiring, its tick loop on a live cluster, its checks, HTTP API, metrics, metering,
state store and audit log (docs/DAEMON.md)."""
