"""The model: one layer map, its parameters and configuration, masks, norms, weights and token families.

Private: the public names are re-exported by `rankdyn`, `rankdyn.masks`, `rankdyn.weights` and
`rankdyn.layer`. Imports only `rankdyn._observe` (tolerances) and the support modules.
"""
