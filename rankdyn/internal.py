"""Building blocks that most users never need, kept public for extensions and tests: the
layer's parts, CLI name tables and batch sharding over devices."""

from ._model._layer import (
    PLACEMENTS as PLACEMENTS,
    AttentionWeights as AttentionWeights,
    LayerAux as LayerAux,
    masked_softmax as masked_softmax,
)
from ._model._norms import LN_NAMES as LN_NAMES, make_norm as make_norm
from ._run._sharding import batch_mesh as batch_mesh, shard_batch as shard_batch
