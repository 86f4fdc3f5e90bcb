"""Weight families for the value, query and key matrices, and the initial-token families.

The value families include the paper's constructions (orthogonal $W_V$ for Theorem 2, the
full bidiagonal $W_V = I + wS$ and Jordan blocks of App. F, ``docs/theory.md#constructions``).
"""

from ._model._tokens import X0_NAMES as X0_NAMES
from ._model._weights import (
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
