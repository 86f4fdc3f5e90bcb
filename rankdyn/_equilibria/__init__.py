"""The implementation of `rankdyn.equilibria` (the public names are in rankdyn/equilibria.py)."""
