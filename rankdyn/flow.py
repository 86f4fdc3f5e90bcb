"""The self-attention flow on the sphere, in continuous time (docs/theory.md#continuous-time).

Re-exports only: the field (`FlowField`, SA or USA with any mask and $Q, K, V$), its
integration with Diffrax (`solve_flow`, its per-trajectory `RESULTS`; with ``noise=`` the
Stratonovich SDE on the sphere, and `GeodesicHeun`, its solver that keeps every radius), the
observables (`cluster_count`, `interaction_energy`,
`FlowObserver`; in O(n d) `order_parameter`, `harmonics`, `circle_cluster_count`, `circle_wasserstein1`,
`DensityObserver`), the random-weight depth at diffusive scaling (`random_depth_values`,
`random_depth_layer`) and the equilibria with their
classification (`find_zeros`, `classify_equilibrium`).
"""

from ._flow._equilibria import (
    Classification as Classification,
    classify_equilibrium as classify_equilibrium,
    field_jacobian as field_jacobian,
    find_zeros as find_zeros,
    rotation_invariant as rotation_invariant,
)
from ._flow._field import (
    DYNAMICS as DYNAMICS,
    FlowField as FlowField,
    interaction_energy as interaction_energy,
    tangent_project as tangent_project,
)
from ._flow._flow_metrics import (
    FLOW_METRICS as FLOW_METRICS,
    FlowObserver as FlowObserver,
    cluster_count as cluster_count,
    diameter as diameter,
)
from ._flow._geodesic import GeodesicHeun as GeodesicHeun
from ._flow._noise import NOISE_SOLVERS as NOISE_SOLVERS
from ._flow._observables import (
    DensityObserver as DensityObserver,
    circle_cluster_count as circle_cluster_count,
    circle_wasserstein1 as circle_wasserstein1,
    harmonics as harmonics,
    order_parameter as order_parameter,
)
from ._flow._plateaus import longest_plateau as longest_plateau, plateaus as plateaus
from ._flow._random_depth import (
    random_depth_layer as random_depth_layer,
    random_depth_values as random_depth_values,
)
from ._flow._sde_api import solve_flow as solve_flow
from ._flow._solve import FlowSolution as FlowSolution, uniform_times as uniform_times
from ._flow._solvers import (
    ADAPTIVE_SOLVERS as ADAPTIVE_SOLVERS,
    RK4 as RK4,
    SOLVERS as SOLVERS,
    ProjectedSolver as ProjectedSolver,
)
