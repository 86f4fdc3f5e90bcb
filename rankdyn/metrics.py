r"""Rank-collapse measures of one token matrix, and the names `simulate` records.

The paper's $\mu(X) = \|X - \mathbf 1\gamma_X\|_F$ (eq. 4) with its scale-free companions
(``docs/theory.md#metrics``). Every function maps one ``(n, d)`` matrix; ``jax.vmap`` them
over a batch.
"""

from ._metrics import (
    METRIC_NAMES as METRIC_NAMES,
)
from ._metrics import (
    collapse_metrics as collapse_metrics,
)
from ._metrics import (
    cosine_matrix as cosine_matrix,
)
from ._metrics import (
    direction_metrics as direction_metrics,
)
from ._metrics import (
    effective_rank as effective_rank,
)
from ._metrics import (
    mean_abs_cosine as mean_abs_cosine,
)
from ._metrics import (
    min_cosine as min_cosine,
)
from ._metrics import (
    mu as mu,
)
from ._metrics import (
    mu_normalized as mu_normalized,
)
from ._metrics import (
    mu_relative as mu_relative,
)
from ._metrics import (
    numerical_rank as numerical_rank,
)
from ._metrics import (
    row_norms as row_norms,
)
from ._metrics import (
    singular_values as singular_values,
)
from ._metrics import (
    stable_rank as stable_rank,
)
from ._observe import ALL_METRICS as ALL_METRICS
from ._observe import parse_metrics as parse_metrics
from ._spectral import SVD_METHODS as SVD_METHODS
