"""Building blocks that most users never need, kept public for extensions and tests: the
layer's parts, CLI name tables and batch sharding over devices."""

from ._model._layer import (
    PLACEMENTS as PLACEMENTS,
)
from ._model._layer import (
    AttentionWeights as AttentionWeights,
)
from ._model._layer import (
    LayerAux as LayerAux,
)
from ._model._layer import (
    masked_softmax as masked_softmax,
)
from ._model._norms import LN_NAMES as LN_NAMES
from ._model._norms import make_norm as make_norm
from ._run._sharding import batch_mesh as batch_mesh
from ._run._sharding import shard_batch as shard_batch
