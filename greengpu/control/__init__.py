"""The control loop (observe, decide, act), its state store and audit log."""
