"""Equilibria of one layer map: solve, enumerate (exact / tree / joint search), deduplicate, classify.

Modules, one concept each: `_solve` (`find_equilibria` on an Optimistix solver, `RESULTS`),
`_symmetry` (the discrete symmetry group), `_dedupe` (classes modulo symmetry), `_exact` (the
exact census of the paper's system), `_tree` (token-by-token search for acyclic masks),
`_joint` (the joint batched search with deflation), `_continuation` (following equilibria
in ``w`` or the temperature), `_census` (the
pipeline behind ``rankdyn equilibria``) and `_stability` (multipliers on the tangent space).
"""

from ._census import equilibrium_census as equilibrium_census
from ._continuation import continue_equilibria as continue_equilibria
from ._dedupe import EquilibriumClass as EquilibriumClass, deduplicate as deduplicate
from ._exact import ExactCensus as ExactCensus, exact_equilibria as exact_equilibria
from ._solve import (
    RESULTS as RESULTS,
    EquilibriumSolution as EquilibriumSolution,
    default_residual_tol as default_residual_tol,
    equilibrium_rank as equilibrium_rank,
    equilibrium_residual as equilibrium_residual,
    find_equilibria as find_equilibria,
)
from ._linearise import (
    layer_jacobian as layer_jacobian,
    leading_eigenvalues as leading_eigenvalues,
    tangent_basis as tangent_basis,
    tangent_jacobian as tangent_jacobian,
)
from ._stability import (
    Multipliers as Multipliers,
    StabilityReport as StabilityReport,
    block_eigvals as block_eigvals,
    classify_moduli as classify_moduli,
    cluster_means as cluster_means,
    multipliers as multipliers,
    stability as stability,
)
from ._symmetry import symmetric_images as symmetric_images, symmetry_group as symmetry_group
