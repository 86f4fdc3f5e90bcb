"""The paper's theory made executable: closed-form constructions, rates and bounds, basins, and
the search for counterexample value matrices (``docs/theory.md#theorems``,
``#constructions``)."""

from ._theory._basins import (
    basin_fractions as basin_fractions,
)
from ._theory._basins import (
    nearest_classifier as nearest_classifier,
)
from ._theory._basins import (
    rank_classifier as rank_classifier,
)
from ._theory._basins import (
    wilson_interval as wilson_interval,
)
from ._theory._basins_across import BasinScan as BasinScan
from ._theory._basins_across import basins_across as basins_across
from ._theory._constructions import (
    all_closed_form_equilibria as all_closed_form_equilibria,
)
from ._theory._constructions import (
    example_2d as example_2d,
)
from ._theory._constructions import (
    lemma13_condition as lemma13_condition,
)
from ._theory._constructions import (
    lemma13_sample as lemma13_sample,
)
from ._theory._constructions import (
    rank_k_equilibrium as rank_k_equilibrium,
)
from ._theory._constructions import (
    uniform_causal_layer as uniform_causal_layer,
)
from ._theory._counterexample_search import (
    OBJECTIVES as OBJECTIVES,
)
from ._theory._counterexample_search import (
    rank_objective as rank_objective,
)
from ._theory._counterexample_search import (
    search_value_matrix as search_value_matrix,
)
from ._theory._rates import (
    bound_rate as bound_rate,
)
from ._theory._rates import (
    corollary1_rate as corollary1_rate,
)
from ._theory._rates import (
    fit_rate as fit_rate,
)
from ._theory._rates import fit_rate_window as fit_rate_window
from ._theory._rates import (
    theorem1_rate as theorem1_rate,
)
from ._theory._rates import (
    theorem2_rate as theorem2_rate,
)
