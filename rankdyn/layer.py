r"""One layer of the model and its parts: $X \mapsto \mathrm{LN}(A(X)\,X\,W_V)$ (eqs. 1-3).

`make_layer` builds a layer from names; `SelfAttentionLayer` is the `eqx.Module` itself, with its
weights (`AttentionWeights`, `MLPWeights`, `GatedMLPWeights`), the optional outputs of one step
(`LayerAux`), the attention restricted to the mask graph (`masked_softmax`), the normalisations
($\mathrm{LN}$: `SphereNorm`, `LayerNorm`, `RMSNorm`, built by name with `make_norm`) and the name
tables the command line and the TOML keys read (`PLACEMENTS`, `LN_NAMES`). The names most scripts
need (`make_layer`, `SelfAttentionLayer`, `MLPWeights` and the norms) are also at the top level.
"""

from ._model._build import make_layer as make_layer
from ._model._layer import (
    PLACEMENTS as PLACEMENTS,
    AttentionWeights as AttentionWeights,
    LayerAux as LayerAux,
    SelfAttentionLayer as SelfAttentionLayer,
    masked_softmax as masked_softmax,
)
from ._model._mlp import GatedMLPWeights as GatedMLPWeights, MLPWeights as MLPWeights
from ._model._norms import (
    LN_NAMES as LN_NAMES,
    AbstractNorm as AbstractNorm,
    LayerNorm as LayerNorm,
    RMSNorm as RMSNorm,
    SphereNorm as SphereNorm,
    make_norm as make_norm,
)
