"""rankdyn: token dynamics of masked self-attention with LayerNorm, in JAX.

Implements and extends Wu, Ajorlou, Wang, Jegelka, Jadbabaie, "On the Role of Attention Masks
and LayerNorm in Transformers" (NeurIPS 2024). This module is the table of contents.
"""

from ._io import package_version as _package_version

__version__ = _package_version("rankdyn")

from ._build import make_layer as make_layer
from ._graph import GraphInfo as GraphInfo, distances as distances, graph_info as graph_info
from ._init import X0_NAMES as X0_NAMES, TokenSampler as TokenSampler, initial_tokens as initial_tokens
from ._layer import (
    PLACEMENTS as PLACEMENTS,
    AttentionWeights as AttentionWeights,
    LayerAux as LayerAux,
    MLPWeights as MLPWeights,
    SelfAttentionLayer as SelfAttentionLayer,
    masked_softmax as masked_softmax,
)
from ._masks import (
    MASK_NAMES as MASK_NAMES,
    causal_mask as causal_mask,
    complete_mask as complete_mask,
    dilated_mask as dilated_mask,
    global_local_mask as global_local_mask,
    make_mask as make_mask,
    mask_from_adjacency as mask_from_adjacency,
    random_mask as random_mask,
    window_mask as window_mask,
)
from ._metrics import (
    METRIC_NAMES as METRIC_NAMES,
    collapse_metrics as collapse_metrics,
    direction_metrics as direction_metrics,
    cosine_matrix as cosine_matrix,
    effective_rank as effective_rank,
    mean_abs_cosine as mean_abs_cosine,
    min_cosine as min_cosine,
    mu as mu,
    mu_normalized as mu_normalized,
    mu_relative as mu_relative,
    numerical_rank as numerical_rank,
    row_norms as row_norms,
    singular_values as singular_values,
    stable_rank as stable_rank,
)
from ._norms import (
    LN_NAMES as LN_NAMES,
    AbstractNorm as AbstractNorm,
    LayerNorm as LayerNorm,
    RMSNorm as RMSNorm,
    SphereNorm as SphereNorm,
    make_norm as make_norm,
)
from ._rates import (
    corollary1_rate as corollary1_rate,
    fit_rate as fit_rate,
    theorem1_rate as theorem1_rate,
    theorem2_rate as theorem2_rate,
)
from ._simulate import Trajectory as Trajectory, simulate as simulate
from ._stats import Summary as Summary
from ._weights import (
    QK_NAMES as QK_NAMES,
    VALUE_NAMES as VALUE_NAMES,
    bert_uniform as bert_uniform,
    bidiagonal as bidiagonal,
    gaussian as gaussian,
    jordan_block as jordan_block,
    orthogonal as orthogonal,
    query_key_matrices as query_key_matrices,
    spectral_normalized as spectral_normalized,
    value_matrix as value_matrix,
)

# Closed-form constructions and stability (issue 4)
from ._constructions import (
    all_closed_form_equilibria as all_closed_form_equilibria,
    example_2d as example_2d,
    lemma13_condition as lemma13_condition,
    lemma13_sample as lemma13_sample,
    rank_k_equilibrium as rank_k_equilibrium,
    uniform_causal_layer as uniform_causal_layer,
)
from .equilibria import (
    StabilityReport as StabilityReport,
    block_eigvals as block_eigvals,
    classify_moduli as classify_moduli,
    cluster_means as cluster_means,
    layer_jacobian as layer_jacobian,
    leading_eigenvalues as leading_eigenvalues,
    stability as stability,
    tangent_basis as tangent_basis,
    tangent_jacobian as tangent_jacobian,
)

# Sweeps (issue 6): TOML grid -> resumable chunks -> xarray dataset (docs/sweep.md)
from .sweep import (
    SweepConfig as SweepConfig,
    SweepPlan as SweepPlan,
    assemble_sweep as assemble_sweep,
    load_sweep_config as load_sweep_config,
    parse_sweep_config as parse_sweep_config,
    run_sweep as run_sweep,
    sweep_plan as sweep_plan,
)

# Equilibrium search (issue 4): batched Gauss-Newton/LM + deflation, dedup modulo symmetries
from .equilibria import (
    RESULTS as RESULTS,
    EquilibriumClass as EquilibriumClass,
    EquilibriumSolution as EquilibriumSolution,
    deduplicate as deduplicate,
    equilibrium_rank as equilibrium_rank,
    equilibrium_residual as equilibrium_residual,
    find_equilibria as find_equilibria,
    symmetric_images as symmetric_images,
    symmetry_group as symmetry_group,
)

# Performance at scale (issue 5): batch sharding over devices
from ._sharding import batch_mesh as batch_mesh, shard_batch as shard_batch
from ._devices import use_cpu_devices as use_cpu_devices

# Basins and counterexample value-matrix search (issue 4)
from ._basins import (
    basin_fractions as basin_fractions,
    nearest_classifier as nearest_classifier,
    rank_classifier as rank_classifier,
    wilson_interval as wilson_interval,
)
from ._counterexample_search import (
    OBJECTIVES as OBJECTIVES,
    rank_objective as rank_objective,
    search_value_matrix as search_value_matrix,
)

# The whole equilibrium pipeline as one call (behind `rankdyn equilibria`)
from .equilibria import equilibrium_census as equilibrium_census
from .equilibria import exact_equilibria as exact_equilibria
