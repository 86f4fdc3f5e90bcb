"""Equilibria of one layer map: solve, enumerate (exact / tree / joint search), deduplicate, classify.

Modules, one concept each: `_solve` (`find_equilibria` on an Optimistix solver; its status is `RESULTS`),
`_symmetry` (the discrete symmetry group), `_dedupe` (classes modulo symmetry), `_exact` (the
exact census of the paper's system), `_tree` (token-by-token search for acyclic masks),
`_joint` (the joint batched search with deflation), `_continuation` (`continue_branch`: pseudo-arclength
continuation in any layer parameter or of any map `f(x, p)`, on `_arclength`, `_bifurcations`, `_quotient`,
`_branch`, `_maps`, `_normal_forms`: the coefficients and criticality of located points), `_cycles`
(`switch_branch` at a period doubling), `_branch_points` (`branch_point_starts`: the other branch at
a branch point), `_curves` (`continue_curve`: bifurcation curves in two parameters, with their
codimension-2 points from `_codim2`), `_bifurcation_point` (`bifurcation_point`: a located
bifurcation re-solved at other inputs, differentiable by the implicit-function theorem), `_census`
(the pipeline behind ``rankdyn equilibria``) and `_stability` (multipliers on the tangent space).
"""

from ._equilibria._bifurcation_point import bifurcation_point as bifurcation_point
from ._equilibria._branch import (
    Bifurcation as Bifurcation,
    Branch as Branch,
)
from ._equilibria._branch_points import branch_point_starts as branch_point_starts
from ._equilibria._census import equilibrium_census as equilibrium_census
from ._equilibria._codim2 import Curve as Curve, SpecialPoint as SpecialPoint
from ._equilibria._continuation import continue_branch as continue_branch
from ._equilibria._curves import continue_curve as continue_curve
from ._equilibria._cycles import BranchStart as BranchStart, switch_branch as switch_branch
from ._equilibria._dedupe import EquilibriumClass as EquilibriumClass, deduplicate as deduplicate
from ._equilibria._exact import ExactCensus as ExactCensus, exact_equilibria as exact_equilibria
from ._equilibria._linearise import (
    layer_jacobian as layer_jacobian,
    leading_eigenvalues as leading_eigenvalues,
    tangent_basis as tangent_basis,
    tangent_jacobian as tangent_jacobian,
)
from ._equilibria._quotient import commuting_rotations as commuting_rotations
from ._equilibria._results import (
    CensusResult as CensusResult,
    EquilibriumRecord as EquilibriumRecord,
    JointOptions as JointOptions,
    JointResult as JointResult,
    SymmetryGroup as SymmetryGroup,
    TreeResult as TreeResult,
)
from ._equilibria._solve import (
    EquilibriumSolution as EquilibriumSolution,
    default_residual_tol as default_residual_tol,
    equilibrium_rank as equilibrium_rank,
    equilibrium_residual as equilibrium_residual,
    find_equilibria as find_equilibria,
)
from ._equilibria._stability import (
    Multipliers as Multipliers,
    StabilityReport as StabilityReport,
    block_eigvals as block_eigvals,
    classify_moduli as classify_moduli,
    cluster_means as cluster_means,
    multipliers as multipliers,
    stability as stability,
)
from ._equilibria._symmetry import symmetric_images as symmetric_images, symmetry_group as symmetry_group
