r"""Where the normalisation sits around each sub-block: the placement schemes of one layer.

$N$ is the layer's normalisation of the sub-block, $F$ the sub-block (the attention
$F(X) = [A_1 X W_V^{(1)}, \dots] W_O$, or the MLP; hidden dropout included) and $t$ the depth
from 0. The MLP sub-block, when present, follows the attention one and is placed the same way
(docs/theory.md#normalisation-schemes):

| placement | one sub-block | residual |
|---|---|---|
| ``none`` | $y = F(x)$ (eq. 2) | $x + F(x)$ with ``skip`` |
| ``post`` | $y = N(F(x))$ (eq. 3) | $N(x + F(x))$ with ``skip`` |
| ``pre`` | $y = F(N(x))$ (§4.2) | $x + F(N(x))$ with ``skip`` |
| ``peri`` | $y = x + N(F(N(x)))$ | always |
| ``mix`` | ``post`` for $t <$ ``mix_layers``, ``pre`` after | with ``skip`` |
| ``ngpt`` | $y = N\big(x + \alpha\,(N(F(N(x))) - N(x))\big)$, $N$ the sphere norm | always |
| ``lns`` | $y = x + F\big(N(x) / \sqrt{t + 1}\big)$ | always |

With ``attention_from_normalized=False`` the attention scores of every scheme that feeds $F$ a
normalised input read the un-normalised $x$ instead (the values still read the normalised one).
"""

from __future__ import annotations

import copy
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from .._errors import UsageError

__all__ = [
    "apply_placement",
    "attention_input",
    "check_scheme",
    "fixed_point_layer",
    "on_spheres",
    "NO_FIXED_POINTS",
]


def apply_placement(layer, x, t, w, keys, prec):
    """The layer of depth ``t`` on ``x``: ``(y, eps_min, degenerate)``.

    ``layer`` is the `SelfAttentionLayer` (its ``placement``, ``skip``, norms, ``mix_layers``,
    ``ngpt_alpha``), ``w`` its weights at depth ``t``, ``keys`` three dropout keys (or Nones).
    """
    scheme = layer.placement
    if scheme != "mix":
        return _layer(scheme, layer, x, t, w, keys, prec)
    k = layer.mix_layers
    if isinstance(t, int):
        return _layer("post" if t < k else "pre", layer, x, t, w, keys, prec)
    # A traced depth (the depth scan): one branch runs; under vmap over t both run and one is kept.
    run = lambda s, x_: _layer(s, layer, x_, t, w, keys, prec)  # noqa: E731
    return lax.cond(jnp.asarray(t) < k, partial(run, "post"), partial(run, "pre"), x)


def _layer(scheme, layer, x, t, w, keys, prec):
    flags = [jnp.array(False)]

    def norm(block):
        def apply(v):
            y, bad = layer._norm(w, block)(v)
            flags.append(jnp.any(bad))
            return y

        return apply

    eps = []

    def attention(h_att, h_in):
        sa, eps_min = layer._attention_block(h_att, h_in, w, keys[0])
        eps.append(eps_min)
        return layer._drop(sa, keys[1], layer.hidden_dropout)

    y = _sublayer(scheme, layer, x, t, attention, norm("attn"))
    if w.mlp is not None:
        mlp = lambda h_att, h_in: layer._drop(w.mlp(h_in, prec), keys[2], layer.hidden_dropout)  # noqa: E731
        y = _sublayer(scheme, layer, y, t, mlp, norm("mlp"))
    degenerate = flags[0]
    for f in flags[1:]:
        degenerate = degenerate | f
    return y, eps[0], degenerate


def _sublayer(scheme, layer, x, t, f, n):
    """One sub-block ``f(x_att, x_in)`` with the norm ``n`` placed by ``scheme`` (module table)."""
    if scheme == "none":
        out = f(x, x)
        return x + out if layer.skip else out
    if scheme == "post":
        out = f(x, x)
        return n(x + out if layer.skip else out)
    h_att, h = _inputs(scheme, layer, x, t, n)
    if scheme == "lns":
        return x + f(h_att, h)
    if scheme == "pre":
        out = f(h_att, h)
        return x + out if layer.skip else out
    if scheme == "peri":
        return x + n(f(h_att, h))
    if scheme == "ngpt":
        # A step of alpha times N(F(N(x))) - N(x) from x, then back onto the sphere (on the
        # sphere x = N(x): a step from x towards N(F(x)) along their chord).
        alpha = layer.ngpt_alpha.astype(x.dtype)
        return n(x + alpha * (n(f(h_att, h)) - h))
    raise RuntimeError(f"unknown placement {scheme!r}")


def _inputs(scheme, layer, x, t, n):
    """``(x_att, x_in)`` a sub-block reads under ``scheme``: the scores' tokens and the values'."""
    if scheme in ("none", "post"):
        return x, x
    h = n(x)
    if scheme == "lns":
        # LayerNorm Scaling: the normalised input shrinks as 1/sqrt(t + 1) with depth.
        h = h / jnp.sqrt(jnp.asarray(t, x.dtype) + 1)
    return (h if layer.attention_from_normalized else x), h


def attention_input(layer, x, t, w):
    """The tokens the attention sub-block of depth ``t`` computes its scores from (eval mode): what
    `_sublayer` hands it, for measurements of $A^{(t)}$ such as attention sinks."""
    if layer.placement != "mix":
        return _attention_input(layer.placement, layer, x, t, w)
    if isinstance(t, int):
        return _attention_input("post" if t < layer.mix_layers else "pre", layer, x, t, w)
    return jnp.where(jnp.asarray(t) < layer.mix_layers, x, _attention_input("pre", layer, x, t, w))


def _attention_input(scheme, layer, x, t, w):
    return _inputs(scheme, layer, x, t, lambda v: layer._norm(w, "attn")(v)[0])[0]


def check_scheme(placement: str, mix_layers, ngpt_alpha):
    """``mix_layers`` (an int >= 0) with ``"mix"`` only; ``ngpt_alpha`` in (0, 1] with ``"ngpt"`` only."""
    if (mix_layers is not None) != (placement == "mix"):
        raise UsageError(
            f"mix_layers goes with placement='mix' (and it needs it); got {placement!r}, {mix_layers}."
        )
    if (ngpt_alpha is not None) != (placement == "ngpt"):
        raise UsageError(f"ngpt_alpha goes with placement='ngpt' (and it needs it); got {placement!r}.")
    if mix_layers is not None and (
        isinstance(mix_layers, bool) or int(mix_layers) != mix_layers or mix_layers < 0
    ):
        raise UsageError(f"mix_layers must be an integer >= 0, got {mix_layers!r}.")
    if ngpt_alpha is None:
        return (None if mix_layers is None else int(mix_layers)), None
    alpha = jnp.asarray(ngpt_alpha, dtype=float)
    if not isinstance(alpha, jax.core.Tracer) and not (alpha.ndim == 0 and 0 < float(alpha) <= 1):
        raise UsageError(f"ngpt_alpha must be a scalar in (0, 1], got {ngpt_alpha!r}.")
    return None, alpha


#: Why a placement's map has no fixed points to look for (equilibria, continuation).
NO_FIXED_POINTS = {
    "peri": "peri's map x + N(F(N(x))) has no fixed points: a fixed point needs N(F(N(x))) = 0, "
    "and a normalised row never vanishes",
    "lns": "lns's map x + F(N(x) / sqrt(t + 1)) changes with every depth t, and a fixed point of "
    "one of them needs the added term F to vanish",
}


def fixed_point_layer(layer, t=0):
    """The one map of depth ``t`` whose fixed points are sought: Mix-LN at a concrete ``t`` is its
    post-LN or pre-LN layer; peri and lns are refused (`NO_FIXED_POINTS`), naming the reason.

    Raises:
        UsageError: for ``placement`` peri or lns.
    """
    if layer.placement in NO_FIXED_POINTS:
        raise UsageError(
            f"placement={layer.placement!r}: {NO_FIXED_POINTS[layer.placement]}; equilibria and "
            "continuation run for none, post, pre, ngpt and mix (at one layer t)."
        )
    if layer.placement != "mix":
        return layer
    out = copy.copy(layer)
    # Static fields of a frozen module: set on the copy (the same arrays, another program).
    object.__setattr__(out, "placement", "post" if int(t) < layer.mix_layers else "pre")
    object.__setattr__(out, "mix_layers", None)
    return out


def on_spheres(layer) -> bool:
    """Whether the map ends with the norm on every row (post, ngpt): its outputs lie on spheres."""
    return layer.placement in ("post", "ngpt")
