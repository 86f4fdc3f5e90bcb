"""The implementation of `rankdyn.equilibria` (the public names are in rankdyn/equilibria.py)."""

#: Largest n * d of a continuation: every corrector step forms the dense Jacobian (8 (n d)^2 bytes)
#: and an SVD of it. Here, not in `_arclength`, so that ``rankdyn continue`` checks it before JAX loads.
MAX_STATE = 2048
