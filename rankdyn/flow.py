"""The self-attention flow on the sphere, in continuous time (docs/theory.md#continuous-time).

Re-exports only: the field (`FlowField`, SA or USA with any mask and $Q, K, V$), its
integration with Diffrax (`solve_flow`, its per-trajectory `RESULTS`), the observables
(`cluster_count`, `interaction_energy`, `FlowObserver`) and the equilibria with their
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
from ._flow._plateaus import longest_plateau as longest_plateau, plateaus as plateaus
from ._flow._solve import (
    FlowSolution as FlowSolution,
    solve_flow as solve_flow,
    uniform_times as uniform_times,
)
from ._flow._solvers import (
    ADAPTIVE_SOLVERS as ADAPTIVE_SOLVERS,
    RK4 as RK4,
    SOLVERS as SOLVERS,
    ProjectedSolver as ProjectedSolver,
)
