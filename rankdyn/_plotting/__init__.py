"""The implementation of `rankdyn.plotting` (the public names are in rankdyn/plotting.py)."""
