"""The implementation of `rankdyn.sweep` (the public names are in rankdyn/sweep.py)."""
