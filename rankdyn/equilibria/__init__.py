"""Equilibria of one layer map: solve, enumerate (exact / tree / joint search), deduplicate, classify.

Modules, one concept each: `_solve` (`find_equilibria` on an Optimistix solver, `RESULTS`),
`_symmetry` (the discrete symmetry group), `_dedupe` (classes modulo symmetry), `_exact` (the
exact census of the paper's system), `_tree` (token-by-token search for acyclic masks),
`_joint` (the joint batched search with deflation), `_continuation` (`continue_branch`: pseudo-arclength
continuation in any layer parameter, on `_arclength`, `_bifurcations`, `_quotient`, `_branch`), `_census` (the
pipeline behind ``rankdyn equilibria``) and `_stability` (multipliers on the tangent space).
"""

from ._branch import BRANCH_RESULTS as BRANCH_RESULTS
from ._branch import Bifurcation as Bifurcation
from ._branch import Branch as Branch
from ._census import equilibrium_census as equilibrium_census
from ._continuation import continue_branch as continue_branch
from ._continuation import continue_equilibria as continue_equilibria
from ._dedupe import EquilibriumClass as EquilibriumClass
from ._dedupe import deduplicate as deduplicate
from ._exact import ExactCensus as ExactCensus
from ._exact import exact_equilibria as exact_equilibria
from ._linearise import (
    layer_jacobian as layer_jacobian,
)
from ._linearise import (
    leading_eigenvalues as leading_eigenvalues,
)
from ._linearise import (
    tangent_basis as tangent_basis,
)
from ._linearise import (
    tangent_jacobian as tangent_jacobian,
)
from ._quotient import commuting_rotations as commuting_rotations
from ._results import CensusResult as CensusResult
from ._results import EquilibriumRecord as EquilibriumRecord
from ._results import JointOptions as JointOptions
from ._results import JointResult as JointResult
from ._results import SymmetryGroup as SymmetryGroup
from ._results import TreeResult as TreeResult
from ._solve import (
    RESULTS as RESULTS,
)
from ._solve import (
    EquilibriumSolution as EquilibriumSolution,
)
from ._solve import (
    default_residual_tol as default_residual_tol,
)
from ._solve import (
    equilibrium_rank as equilibrium_rank,
)
from ._solve import (
    equilibrium_residual as equilibrium_residual,
)
from ._solve import (
    find_equilibria as find_equilibria,
)
from ._stability import (
    Multipliers as Multipliers,
)
from ._stability import (
    StabilityReport as StabilityReport,
)
from ._stability import (
    block_eigvals as block_eigvals,
)
from ._stability import (
    classify_moduli as classify_moduli,
)
from ._stability import (
    cluster_means as cluster_means,
)
from ._stability import (
    multipliers as multipliers,
)
from ._stability import (
    stability as stability,
)
from ._symmetry import symmetric_images as symmetric_images
from ._symmetry import symmetry_group as symmetry_group
