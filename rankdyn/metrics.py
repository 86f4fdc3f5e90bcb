r"""Rank-collapse measures of one token matrix, and the names `simulate` records.

The paper's $\mu(X) = \|X - \mathbf 1\gamma_X\|_F$ (eq. 4) with its scale-free companions
(``docs/theory.md#metrics``). Every function maps one ``(n, d)`` matrix; ``jax.vmap`` them
over a batch.
"""

from ._observe._metrics import (
    METRIC_NAMES as METRIC_NAMES,
)
from ._observe._metrics import (
    collapse_metrics as collapse_metrics,
)
from ._observe._metrics import (
    cosine_matrix as cosine_matrix,
)
from ._observe._metrics import (
    direction_metrics as direction_metrics,
)
from ._observe._metrics import (
    effective_rank as effective_rank,
)
from ._observe._metrics import (
    mean_abs_cosine as mean_abs_cosine,
)
from ._observe._metrics import (
    min_cosine as min_cosine,
)
from ._observe._metrics import (
    mu as mu,
)
from ._observe._metrics import (
    mu_normalized as mu_normalized,
)
from ._observe._metrics import (
    mu_relative as mu_relative,
)
from ._observe._metrics import (
    numerical_rank as numerical_rank,
)
from ._observe._metrics import (
    row_norms as row_norms,
)
from ._observe._metrics import (
    singular_values as singular_values,
)
from ._observe._metrics import (
    stable_rank as stable_rank,
)
from ._observe._observer import ALL_METRICS as ALL_METRICS
from ._observe._observer import parse_metrics as parse_metrics
from ._observe._spectral import SVD_METHODS as SVD_METHODS
