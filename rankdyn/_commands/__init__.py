"""Subcommands of the ``rankdyn`` CLI, one module each (see `rankdyn.cli`)."""
