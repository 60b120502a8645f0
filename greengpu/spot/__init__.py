"""Lever 3: spot versus on-demand cloud capacity."""
