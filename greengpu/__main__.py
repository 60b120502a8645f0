"""`python -m greengpu`: the same as the greengpu command."""

from greengpu.cli import entry_point

entry_point()
