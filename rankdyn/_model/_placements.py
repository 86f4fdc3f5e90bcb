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
from collections.abc import Callable
from functools import partial
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, Float

from .._errors import UsageError
from ._names import PLACEMENTS, RESIDUAL_PLACEMENTS

__all__ = [
    "AbstractPlacement",
    "NoNorm",
    "PostLN",
    "PreLN",
    "PeriLN",
    "MixLN",
    "NGPT",
    "LNScaling",
    "PLACEMENT_SCHEMES",
    "LayerParts",
    "make_placement",
    "attention_input",
    "check_scheme",
    "fixed_point_layer",
    "on_spheres",
    "NO_FIXED_POINTS",
]


class LayerParts(eqx.Module):
    """What a placement arranges: the layer's sub-blocks and norms at one depth (built by the layer).

    Attributes:
        attention: ``(x_att, x_in) -> (F(X), eps_min)``, hidden dropout included.
        mlp: ``x_in -> MLP(x_in)``, hidden dropout included; None without an MLP.
        norms: the normalisations of the attention and the MLP sub-block, each ``v -> (N(v), zero_rows)``.
        skip: the residual connection of the schemes that have it as an option (none, post, pre).
        from_normalized: compute the scores from the normalised input (pre-LN's default) or from x.
    """

    attention: Callable
    mlp: Callable | None
    norms: tuple[Callable, Callable]
    skip: bool = eqx.field(static=True)
    from_normalized: bool = eqx.field(static=True)

    def run(self, scheme: "AbstractPlacement", x, t):
        """``(y, eps_min, degenerate)``: the attention then the MLP sub-block, each placed by
        ``scheme.sublayer``; ``degenerate`` if a norm met a zero row."""
        flags = [jnp.array(False)]

        def norm(i):
            def apply(v):
                y, bad = self.norms[i](v)
                flags.append(jnp.any(bad))
                return y

            return apply

        eps = []

        def attention(h_att, h_in):
            sa, eps_min = self.attention(h_att, h_in)
            eps.append(eps_min)
            return sa

        y = scheme.sublayer(self, x, t, attention, norm(0))
        if self.mlp is not None:
            y = scheme.sublayer(self, y, t, lambda h_att, h_in: self.mlp(h_in), norm(1))
        degenerate = flags[0]
        for f in flags[1:]:
            degenerate = degenerate | f
        return y, eps[0], degenerate


class AbstractPlacement(eqx.Module):
    """Where the norm $N$ sits around each sub-block $F$ (module table); one subclass per name."""

    #: The placement's name (``layer.placement``, ``--placement``, the TOML key ``placement``).
    name: ClassVar[str]
    #: The map ends with the norm on every row: its outputs lie on spheres (post, ngpt).
    on_spheres: ClassVar[bool] = False
    #: The residual stream is part of the scheme (``skip`` implied: `RESIDUAL_PLACEMENTS`).
    residual: ClassVar[bool] = False
    #: Why the map has no fixed points to look for, or None (equilibria, continuation).
    no_fixed_points: ClassVar[str | None] = None

    def apply(self, parts: LayerParts, x, t):
        """The layer of depth ``t`` on ``x``: ``(y, eps_min, degenerate)``."""
        return parts.run(self, x, t)

    def sublayer(self, parts: LayerParts, x, t, f, n):
        """One sub-block ``f(x_att, x_in)`` with the norm ``n`` placed by this scheme."""
        raise NotImplementedError

    def inputs(self, x, t, n, from_normalized: bool):
        """``(x_att, x_in)`` a sub-block reads: the scores' tokens and the values'."""
        h = n(x)
        return (h if from_normalized else x), h

    def attention_input(self, x, t, n, from_normalized: bool):
        """The tokens the attention sub-block of depth ``t`` computes its scores from."""
        return self.inputs(x, t, n, from_normalized)[0]

    def at(self, t) -> "AbstractPlacement":
        """The one scheme of a concrete depth ``t`` (Mix-LN: post or pre; the others: itself)."""
        return self


class NoNorm(AbstractPlacement):
    """``none``: $y = F(x)$ (eq. 2), $x + F(x)$ with ``skip``."""

    name: ClassVar[str] = "none"

    def sublayer(self, parts, x, t, f, n):
        out = f(x, x)
        return x + out if parts.skip else out

    def inputs(self, x, t, n, from_normalized):
        return x, x


class PostLN(AbstractPlacement):
    """``post``: $y = N(F(x))$ (eq. 3), $N(x + F(x))$ with ``skip``."""

    name: ClassVar[str] = "post"
    on_spheres: ClassVar[bool] = True

    def sublayer(self, parts, x, t, f, n):
        out = f(x, x)
        return n(x + out if parts.skip else out)

    def inputs(self, x, t, n, from_normalized):
        return x, x


class PreLN(AbstractPlacement):
    """``pre``: $y = F(N(x))$ (§4.2), $x + F(N(x))$ with ``skip``."""

    name: ClassVar[str] = "pre"

    def sublayer(self, parts, x, t, f, n):
        out = f(*self.inputs(x, t, n, parts.from_normalized))
        return x + out if parts.skip else out


class PeriLN(AbstractPlacement):
    """``peri``: $y = x + N(F(N(x)))$ (always residual)."""

    name: ClassVar[str] = "peri"
    residual: ClassVar[bool] = True
    no_fixed_points: ClassVar[str | None] = (
        "peri's map x + N(F(N(x))) has no fixed points: a fixed point needs N(F(N(x))) = 0, "
        "and a normalised row never vanishes"
    )

    def sublayer(self, parts, x, t, f, n):
        return x + n(f(*self.inputs(x, t, n, parts.from_normalized)))


class NGPT(AbstractPlacement):
    r"""``ngpt``: $y = N\big(x + \alpha\,(N(F(N(x))) - N(x))\big)$, $N$ the sphere norm (always residual).

    Attributes:
        alpha: the step $\alpha \in (0, 1]$, a scalar array (sweepable: ``layer.ngpt_alpha``).
    """

    alpha: Float[Array, ""]
    name: ClassVar[str] = "ngpt"
    residual: ClassVar[bool] = True
    on_spheres: ClassVar[bool] = True

    def sublayer(self, parts, x, t, f, n):
        h_att, h = self.inputs(x, t, n, parts.from_normalized)
        # A step of alpha times N(F(N(x))) - N(x) from x, then back onto the sphere (on the
        # sphere x = N(x): a step from x towards N(F(x)) along their chord).
        alpha = self.alpha.astype(x.dtype)
        return n(x + alpha * (n(f(h_att, h)) - h))


class LNScaling(AbstractPlacement):
    r"""``lns``: $y = x + F\big(N(x) / \sqrt{t + 1}\big)$, LayerNorm Scaling (always residual)."""

    name: ClassVar[str] = "lns"
    residual: ClassVar[bool] = True
    no_fixed_points: ClassVar[str | None] = (
        "lns's map x + F(N(x) / sqrt(t + 1)) changes with every depth t, and a fixed point of "
        "one of them needs the added term F to vanish"
    )

    def sublayer(self, parts, x, t, f, n):
        return x + f(*self.inputs(x, t, n, parts.from_normalized))

    def inputs(self, x, t, n, from_normalized):
        # LayerNorm Scaling: the normalised input shrinks as 1/sqrt(t + 1) with depth.
        h = n(x) / jnp.sqrt(jnp.asarray(t, x.dtype) + 1)
        return (h if from_normalized else x), h


class MixLN(AbstractPlacement):
    """``mix``: post-LN for depths $t <$ ``layers``, pre-LN after (residual with ``skip``).

    Attributes:
        layers: the number of post-LN layers (static: ``layer.mix_layers``).
    """

    layers: int = eqx.field(static=True)
    name: ClassVar[str] = "mix"

    def at(self, t) -> AbstractPlacement:
        return PostLN() if int(t) < self.layers else PreLN()

    def apply(self, parts, x, t):
        if isinstance(t, int):
            return parts.run(self.at(t), x, t)
        # A traced depth (the depth scan): one branch runs; under vmap over t both run and one is kept.
        run = lambda s, x_: parts.run(s, x_, t)  # noqa: E731
        return lax.cond(jnp.asarray(t) < self.layers, partial(run, PostLN()), partial(run, PreLN()), x)

    def attention_input(self, x, t, n, from_normalized):
        if isinstance(t, int):
            return self.at(t).attention_input(x, t, n, from_normalized)
        pre = PreLN().attention_input(x, t, n, from_normalized)
        return jnp.where(jnp.asarray(t) < self.layers, x, pre)


#: The placement strategies by name: the one table from ``placement=`` (`PLACEMENTS`) to a class.
PLACEMENT_SCHEMES: dict[str, type[AbstractPlacement]] = {
    c.name: c for c in (NoNorm, PostLN, PreLN, PeriLN, MixLN, NGPT, LNScaling)
}
assert tuple(PLACEMENT_SCHEMES) == PLACEMENTS, "the classes follow _names.PLACEMENTS"
assert tuple(c.name for c in PLACEMENT_SCHEMES.values() if c.residual) == RESIDUAL_PLACEMENTS


def make_placement(placement: str, mix_layers=None, ngpt_alpha=None) -> AbstractPlacement:
    """The strategy of ``placement`` with its parameters, checked by `check_scheme`.

    Raises:
        UsageError: an unknown name, or a parameter of another placement (or a missing one).
    """
    if placement not in PLACEMENT_SCHEMES:
        raise UsageError(f"placement must be one of {PLACEMENTS}, got {placement!r}.")
    mix_layers, ngpt_alpha = check_scheme(placement, mix_layers, ngpt_alpha)
    if placement == "mix":
        return MixLN(mix_layers)
    if placement == "ngpt":
        return NGPT(ngpt_alpha)
    return PLACEMENT_SCHEMES[placement]()


def attention_input(layer, x, t, w):
    """The tokens the attention sub-block of depth ``t`` computes its scores from (eval mode): what
    the placement hands it, for measurements of $A^{(t)}$ such as attention sinks."""
    n = lambda v: layer.norm_of(w, "attn")(v)[0]  # noqa: E731
    return layer.scheme.attention_input(x, t, n, layer.attention_from_normalized)


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
NO_FIXED_POINTS = {c.name: c.no_fixed_points for c in PLACEMENT_SCHEMES.values() if c.no_fixed_points}


def fixed_point_layer(layer, t=0):
    """The one map of depth ``t`` whose fixed points are sought: Mix-LN at a concrete ``t`` is its
    post-LN or pre-LN layer; peri and lns are refused (`NO_FIXED_POINTS`), naming the reason.

    Raises:
        UsageError: for ``placement`` peri or lns.
    """
    reason = layer.scheme.no_fixed_points
    if reason is not None:
        raise UsageError(
            f"placement={layer.placement!r}: {reason}; equilibria and "
            "continuation run for none, post, pre, ngpt and mix (at one layer t)."
        )
    scheme = layer.scheme.at(t)
    if scheme is layer.scheme:
        return layer
    out = copy.copy(layer)
    # A field of a frozen module: set on the copy (the same arrays, another program).
    object.__setattr__(out, "scheme", scheme)
    return out


def on_spheres(layer) -> bool:
    """Whether the map ends with the norm on every row (post, ngpt): its outputs lie on spheres."""
    return layer.scheme.on_spheres
