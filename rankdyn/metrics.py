r"""Rank-collapse measures of one token matrix, and the names `simulate` records.

The paper's $\mu(X) = \|X - \mathbf 1\gamma_X\|_F$ (eq. 4) with its scale-free companions
(``docs/theory.md#metrics``). Every function maps one ``(n, d)`` matrix; ``jax.vmap`` them
over a batch.
"""

from ._observe._metric_observer import ALL_METRICS as ALL_METRICS, parse_metrics as parse_metrics
from ._observe._metrics import (
    METRIC_NAMES as METRIC_NAMES,
    collapse_metrics as collapse_metrics,
    cosine_matrix as cosine_matrix,
    direction_metrics as direction_metrics,
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
from ._observe._spectral import SVD_METHODS as SVD_METHODS

# Attention sinks: a layer's attention on token 0 and on the mask's centres (`rankdyn._run._sinks`).
from ._run._sinks import SinkStats as SinkStats, attention_sinks as attention_sinks
