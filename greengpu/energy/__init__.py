"""Energy levers and models (power model, capping, sleep planning, spot choice). Pure: no I/O."""
