"""The model's name tables and its default temperature, without JAX.

The command line's ``--help`` and its refusals read these (choices, defaults) before any array
exists, so they live here, importing nothing heavy; the modules that implement each name
(`_layer`, `_masks`, `_norms`, `_tokens`, `_weights`) import them from here.
"""

from __future__ import annotations

__all__ = [
    "PLACEMENTS",
    "RESIDUAL_PLACEMENTS",
    "MASK_NAMES",
    "LN_NAMES",
    "X0_NAMES",
    "VALUE_NAMES",
    "QK_NAMES",
    "VARIANTS",
    "ATTENTION_MODES",
    "default_dqk",
]

#: Where the normalisation sits: none (eq. 2), after the attention (eq. 3), before it, and the
#: schemes of `rankdyn._model._placements` (Peri-LN, Mix-LN, nGPT, LayerNorm Scaling).
PLACEMENTS = ("none", "post", "pre", "peri", "mix", "ngpt", "lns")
#: Placements whose residual stream is part of the scheme (``skip`` is implied).
RESIDUAL_PLACEMENTS = ("peri", "ngpt", "lns")
#: The attention mask graphs of `rankdyn._model._masks.make_mask`.
MASK_NAMES = ("complete", "causal", "window", "window-uni", "dilated", "global", "random")
#: How the layer computes A (`rankdyn._model._blocked`): the (n, n) softmax, the online softmax over
#: the key blocks the mask touches, or chosen by the number of tokens.
ATTENTION_MODES = ("dense", "blocked", "auto")
#: The normalisations of `rankdyn._model._norms`.
LN_NAMES = ("sphere", "rms", "layernorm")
#: The initial-token families of `rankdyn._model._tokens`.
X0_NAMES = ("gaussian", "sphere", "nonneg", "bert")
#: The value-matrix and query-key families of `rankdyn._model._weights`.
VALUE_NAMES = ("orthogonal", "gaussian", "bert", "identity", "scaled", "bidiagonal", "jordan")
QK_NAMES = ("bert", "gaussian", "zero")
#: A trained checkpoint as trained ("full") or reduced to its SAN parts (`rankdyn._trained`).
VARIANTS = ("full", "san", "san-skip", "san-ln", "san-skip-ln")


def default_dqk(d: int, heads: int = 1) -> float:
    r"""The default temperature: the key width $d_{QK} = d / h$ (eq. 1), the one definition.

    `rankdyn.ModelConfig` (hence `make_layer` and the CLI), the sweep and `SelfAttentionLayer`
    (with its key width ``w_q.shape[-1]`` as ``d`` and ``heads=1``) all fill an unset ``dqk`` here.
    """
    return float(d // heads)
