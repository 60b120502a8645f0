"""Lever 1, capping: the per-GPU decision, the tick's settings, and the rule that prices a cap in occupancy."""
