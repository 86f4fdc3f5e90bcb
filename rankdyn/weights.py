"""Weight families for the value, query and key matrices, and the initial-token families.

The value families include the paper's constructions (orthogonal $W_V$ for Theorem 2, the
full bidiagonal $W_V = I + wS$ and Jordan blocks of App. F, ``docs/theory.md#constructions``).
"""

from ._model._tokens import X0_NAMES as X0_NAMES
from ._model._weights import (
    QK_NAMES as QK_NAMES,
)
from ._model._weights import (
    VALUE_NAMES as VALUE_NAMES,
)
from ._model._weights import (
    bert_uniform as bert_uniform,
)
from ._model._weights import (
    bidiagonal as bidiagonal,
)
from ._model._weights import (
    gaussian as gaussian,
)
from ._model._weights import (
    jordan_block as jordan_block,
)
from ._model._weights import (
    orthogonal as orthogonal,
)
from ._model._weights import (
    query_key_matrices as query_key_matrices,
)
from ._model._weights import (
    spectral_normalized as spectral_normalized,
)
from ._model._weights import (
    value_matrix as value_matrix,
)
