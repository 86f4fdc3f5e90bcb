r"""A trained checkpoint re-normalised: its attention and MLP weights under another norm and placement.

``ckpt.layers(n, placement=P, ln=L)`` keeps every trained attention and MLP array and replaces
the normalisation (docs/theory.md#trained-checkpoints-re-normalised). What happens to the trained
per-layer gains $g$ and biases $b$ of each sub-block's norm:

| ``ln`` | each sub-block's norm | trained $g$ | trained $b$ |
|---|---|---|---|
| unset, or the checkpoint's own kind | the trained norm, unchanged | kept | kept |
| ``layernorm`` | $g \odot (x - \bar x) / \sqrt{\mathrm{var}(x) + \epsilon} + b$ | kept | kept (Llama: none) |
| ``rms`` | $g \odot x / \sqrt{\mathrm{mean}(x^2) + \epsilon}$ | kept | dropped |
| ``sphere`` | $\sqrt d\, x / \lVert x \rVert$ | dropped | dropped |

$\epsilon$ stays the checkpoint's. The sphere's radius is $\sqrt d$, the token norm that a gain-free
LayerNorm or RMSNorm gives, so the trained weights see tokens of the scale they were trained on
(the paper's radius 1 would flatten every trained logit by a factor $d$).
"""

from __future__ import annotations

import math

from .._errors import UsageError
from .._model._names import LN_NAMES, PLACEMENTS
from .._model._norms import AbstractNorm, LayerNorm, RMSNorm, SphereNorm

__all__ = ["own_ln", "renormalised", "check_scheme_arguments"]


def own_ln(arch: str) -> str:
    """The kind of norm an architecture was trained with: ``rms`` (Llama) or ``layernorm``."""
    return "rms" if arch == "llama" else "layernorm"


def _convert(norm: AbstractNorm | None, ln: str) -> AbstractNorm | None:
    """One sub-block's trained norm (arrays with the layer axis) as the norm ``ln``."""
    if norm is None:
        return None
    gain = getattr(norm, "gain", None)
    if ln == "layernorm":
        return LayerNorm(gain, getattr(norm, "bias", None), eps=norm.eps)
    return RMSNorm(gain, eps=norm.eps)


def renormalised(arch: str, d: int, norm_attn, norm_mlp, ln: str | None):
    """``(norm, norm_attn, norm_mlp)`` for `SelfAttentionLayer`: the layer's ``norm`` is the one
    applied (the trained per-layer norm of the attention sub-block, or the sphere), so that
    ``layer.norm`` reports it."""
    if ln is None or ln == own_ln(arch):
        return norm_attn, norm_attn, norm_mlp
    if ln == "sphere":
        return SphereNorm(math.sqrt(d)), None, None
    attn, mlp = _convert(norm_attn, ln), _convert(norm_mlp, ln)
    return attn, attn, mlp


def check_scheme_arguments(variant: str, placement, ln, mix_layers, ngpt_alpha) -> None:
    """``placement`` and ``ln`` with ``variant="full"`` only, and what the scheme needs.

    Raises:
        UsageError: naming the argument.
    """
    if variant != "full" and (placement is not None or ln is not None):
        raise UsageError(
            f"placement and ln re-normalise the trained block: use them with variant='full', not "
            f"variant={variant!r}."
        )
    if placement is not None and placement not in PLACEMENTS:
        raise UsageError(f"placement {placement!r} is unknown; expected one of {', '.join(PLACEMENTS)}.")
    if ln is not None and ln not in LN_NAMES:
        raise UsageError(f"ln {ln!r} is unknown; expected one of {', '.join(LN_NAMES)}.")
    if placement == "ngpt" and ln != "sphere":
        raise UsageError(
            f"placement='ngpt' keeps every token on the sphere: pass ln='sphere' (got ln={ln!r}, the "
            "trained norm when unset)."
        )
    if (mix_layers is not None) != (placement == "mix"):
        raise UsageError("mix_layers goes with placement='mix', and placement='mix' needs it.")
    if (ngpt_alpha is not None) != (placement == "ngpt"):
        raise UsageError("ngpt_alpha goes with placement='ngpt', and placement='ngpt' needs it.")
    if placement == "none" and ln is not None:
        raise UsageError(f"ln={ln!r} is ignored by placement='none' (no norm); drop it.")
