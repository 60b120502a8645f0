"""greengpu: energy- and cost-optimization controller for shared GPU clusters."""

__version__ = "0.1.0"
