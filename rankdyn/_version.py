"""The package version: the one place it is written (pyproject.toml reads it through hatch)."""

__version__ = "0.5.0"
