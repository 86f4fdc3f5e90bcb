"""The paper's theory made executable: closed-form constructions, rates and bounds, basins, and
the search for counterexample value matrices (``docs/theory.md#theorems``,
``#constructions``)."""

from ._theory._basins import (
    basin_fractions as basin_fractions,
    nearest_classifier as nearest_classifier,
    rank_classifier as rank_classifier,
    wilson_interval as wilson_interval,
)
from ._theory._basins_across import BasinScan as BasinScan, basins_across as basins_across
from ._theory._constructions import (
    all_closed_form_equilibria as all_closed_form_equilibria,
    example_2d as example_2d,
    lemma13_condition as lemma13_condition,
    lemma13_sample as lemma13_sample,
    rank_k_equilibrium as rank_k_equilibrium,
    uniform_causal_layer as uniform_causal_layer,
)
from ._theory._counterexample_search import (
    OBJECTIVES as OBJECTIVES,
    rank_objective as rank_objective,
    search_value_matrix as search_value_matrix,
)
from ._theory._equiangular import (
    equiangular_cosine as equiangular_cosine,
    equiangular_rhs as equiangular_rhs,
    equiangular_time as equiangular_time,
    equiangular_tokens as equiangular_tokens,
)
from ._theory._equiangular_layer import (
    one_layer_cosine as one_layer_cosine,
    one_layer_limit as one_layer_limit,
)
from ._theory._equiangular_rates import (
    EQUIANGULAR_PLACEMENTS as EQUIANGULAR_PLACEMENTS,
    EquiangularRate as EquiangularRate,
    equiangular_rate as equiangular_rate,
)
from ._theory._noisy_uniform import (
    critical_noise as critical_noise,
    transition_beta as transition_beta,
    transition_type as transition_type,
    uniform_mode_gain as uniform_mode_gain,
    uniform_mode_rate as uniform_mode_rate,
)
from ._theory._pair_phases import (
    PAIR_RELATIONS as PAIR_RELATIONS,
    causal_pair_equilibria as causal_pair_equilibria,
    causal_pair_phases as causal_pair_phases,
)
from ._theory._rates import (
    bound_rate as bound_rate,
    corollary1_rate as corollary1_rate,
    fit_rate as fit_rate,
    fit_rate_window as fit_rate_window,
    theorem1_rate as theorem1_rate,
    theorem2_rate as theorem2_rate,
)
from ._theory._token_classes import (
    token_class_label as token_class_label,
    token_class_name as token_class_name,
)
