"""The paper's theory as code: collapse rates and bounds, closed-form constructions, the
counterexample search, basins and equilibrium certificates.

Private: the public names are re-exported by `rankdyn.theory`. Imports `rankdyn._model`,
`rankdyn._observe` and `rankdyn._run`.
"""
