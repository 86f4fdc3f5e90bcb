"""Equilibria of one layer map: solve, enumerate (exact / tree / joint search), deduplicate, classify.

Modules, one concept each: `_solve` (`find_equilibria` on an Optimistix solver; its status is `RESULTS`),
`_symmetry` (the discrete symmetry group), `_dedupe` (classes modulo symmetry), `_exact` (the
exact census of the paper's system), `_tree` (token-by-token search for acyclic masks),
`_joint` (the joint batched search with deflation), `_continuation` (`continue_branch`: pseudo-arclength
continuation in any layer parameter or of any map `f(x, p)`, on `_arclength`, `_bifurcations`, `_quotient`,
`_branch`, `_maps`), `_cycles` (`switch_branch` at a period doubling), `_curves` (`continue_curve`:
bifurcation curves in two parameters), `_census` (the pipeline behind ``rankdyn equilibria``) and
`_stability` (multipliers on the tangent space).
"""

from ._equilibria._branch import BRANCH_RESULTS as BRANCH_RESULTS
from ._equilibria._branch import Bifurcation as Bifurcation
from ._equilibria._branch import Branch as Branch
from ._equilibria._census import equilibrium_census as equilibrium_census
from ._equilibria._continuation import continue_branch as continue_branch
from ._equilibria._curves import Curve as Curve
from ._equilibria._curves import continue_curve as continue_curve
from ._equilibria._cycles import BranchStart as BranchStart
from ._equilibria._cycles import switch_branch as switch_branch
from ._equilibria._dedupe import EquilibriumClass as EquilibriumClass
from ._equilibria._dedupe import deduplicate as deduplicate
from ._equilibria._exact import ExactCensus as ExactCensus
from ._equilibria._exact import exact_equilibria as exact_equilibria
from ._equilibria._linearise import (
    layer_jacobian as layer_jacobian,
)
from ._equilibria._linearise import (
    leading_eigenvalues as leading_eigenvalues,
)
from ._equilibria._linearise import (
    tangent_basis as tangent_basis,
)
from ._equilibria._linearise import (
    tangent_jacobian as tangent_jacobian,
)
from ._equilibria._quotient import commuting_rotations as commuting_rotations
from ._equilibria._results import CensusResult as CensusResult
from ._equilibria._results import EquilibriumRecord as EquilibriumRecord
from ._equilibria._results import JointOptions as JointOptions
from ._equilibria._results import JointResult as JointResult
from ._equilibria._results import SymmetryGroup as SymmetryGroup
from ._equilibria._results import TreeResult as TreeResult
from ._equilibria._solve import (
    EquilibriumSolution as EquilibriumSolution,
)
from ._equilibria._solve import (
    default_residual_tol as default_residual_tol,
)
from ._equilibria._solve import (
    equilibrium_rank as equilibrium_rank,
)
from ._equilibria._solve import (
    equilibrium_residual as equilibrium_residual,
)
from ._equilibria._solve import (
    find_equilibria as find_equilibria,
)
from ._equilibria._stability import (
    Multipliers as Multipliers,
)
from ._equilibria._stability import (
    StabilityReport as StabilityReport,
)
from ._equilibria._stability import (
    block_eigvals as block_eigvals,
)
from ._equilibria._stability import (
    classify_moduli as classify_moduli,
)
from ._equilibria._stability import (
    cluster_means as cluster_means,
)
from ._equilibria._stability import (
    multipliers as multipliers,
)
from ._equilibria._stability import (
    stability as stability,
)
from ._equilibria._symmetry import symmetric_images as symmetric_images
from ._equilibria._symmetry import symmetry_group as symmetry_group

# One status enumeration for every solver and run (rankdyn/_results.py); `BRANCH_RESULTS` (the
# status of `continue_branch`, rankdyn/_equilibria/_branch.py) is the same object.
from ._results import RESULTS as RESULTS
