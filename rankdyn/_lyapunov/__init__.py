"""The implementation of `rankdyn.lyapunov` (the public names are in rankdyn/lyapunov.py)."""
