"""The command modules of `greengpu` (each a click command or group; `greengpu.cli` assembles them)."""
