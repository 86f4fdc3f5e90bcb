"""Token normalisations: the paper's LN (rows onto the sphere), RMSNorm and centred LayerNorm.

The paper's theory (docs/theory.md#the-model) uses ``LN(X) = D X`` with ``D = diag(1 / ||X_{i,:}||_2)``: each
token (row) is scaled onto the unit sphere. This is a *left* multiplication, which is why it
cannot be merged into ``W_V`` (App. A) and why it changes the dynamics.

Every normalisation returns ``(y, degenerate)`` where ``degenerate[i]`` says that row ``i`` had
(numerically) zero norm, e.g. two opposite tokens averaged by attention. Such a row is left
at (near) zero instead of becoming a silent NaN, and the flag is reported per trajectory by
`rankdyn.simulate`.
"""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Float

from .._errors import UsageError

__all__ = [
    "AbstractNorm",
    "SphereNorm",
    "RMSNorm",
    "LayerNorm",
    "make_norm",
    "LN_NAMES",
    "qk_normalise",
    "check_ngpt_norms",
]

LN_NAMES = ("sphere", "rms", "layernorm")


def _degenerate_rows(norms: Float[Array, " n"]) -> Bool[Array, " n"]:
    """Rows whose norm is zero up to cancellation error, relative to the largest row.

    A row that is a cancellation of O(1) vectors ends at rounding level ~eps * max norm; a
    relative test catches it whatever the overall scale of the tokens is.
    """
    eps = jnp.finfo(norms.dtype).eps
    tiny = jnp.finfo(norms.dtype).tiny
    scale = jnp.max(norms)
    return (norms <= tiny) | (norms <= 16 * eps * scale)


def _safe_scale(x: Float[Array, "n d"], norms: Float[Array, " n"], target) -> tuple[Array, Array]:
    bad = _degenerate_rows(norms)
    # Divide by 1 on degenerate rows: they stay (near) zero and are reported, never NaN.
    y = x * (target / jnp.where(bad, 1.0, norms))[:, None]
    return y, bad


def _scale_defined(x: Float[Array, "n d"], norms: Float[Array, " n"]) -> Array:
    """``x / norms`` row-wise where the normaliser is defined for every row (eps > 0: norms > 0).

    The same operations as `_safe_scale` (a select, then a reciprocal), with a predicate that
    never holds: XLA would otherwise rewrite a bare ``1 / sqrt`` into an ``rsqrt`` and move the
    last bits of every row. Rows that `_safe_scale` divides by 1 follow the formula here.
    """
    return x * (1.0 / jnp.where(norms <= 0, 1.0, norms))[:, None]


class AbstractNorm(eqx.Module):
    """A row-wise normalisation of tokens: ``(n, d) -> ((n, d), degenerate rows (n,))``."""

    @abc.abstractmethod
    def __call__(self, x: Float[Array, "n d"]) -> tuple[Float[Array, "n d"], Bool[Array, " n"]]:
        raise NotImplementedError


class SphereNorm(AbstractNorm):
    r"""The paper's LayerNorm: each row scaled to norm ``radius`` (docs/theory.md#the-model).

    $\mathrm{LN}(X) = D X$, $D_{ii} = R / \|X_{i,:}\|_2$; the paper uses $R = 1$. With
    $R = \sqrt d$ the token norm matches a real (RMS) LayerNorm.
    """

    radius: Float[Array, ""]

    def __init__(self, radius: ArrayLike = 1.0):
        self.radius = jnp.asarray(radius, dtype=float)

    def __call__(self, x):
        return _safe_scale(x, jnp.linalg.norm(x, axis=-1), self.radius.astype(x.dtype))


class RMSNorm(AbstractNorm):
    r"""RMSNorm (Zhang & Sennrich): $x \mapsto g \odot x / \sqrt{\mathrm{mean}(x^2) + \epsilon}$."""

    gain: Float[Array, " d"] | None
    eps: float = eqx.field(static=True, default=0.0)

    def __init__(self, gain: ArrayLike | None = None, eps: float = 0.0):
        self.gain = None if gain is None else jnp.asarray(gain)
        self.eps = eps

    def __call__(self, x):
        d = x.shape[-1]
        rms = jnp.sqrt(jnp.mean(x**2, axis=-1) + self.eps)
        y, bad = _safe_scale(x, rms, 1.0)
        if self.eps > 0:  # defined for every row (a zero row maps to zero): the formula itself
            y = _scale_defined(x, rms)
        bad = bad | _degenerate_rows(jnp.linalg.norm(x, axis=-1) / jnp.sqrt(d))
        return (y if self.gain is None else y * self.gain[None, :]), bad


class LayerNorm(AbstractNorm):
    r"""Centred LayerNorm as in BERT: $g \odot (x - \bar x)/\sqrt{\mathrm{var}(x) + \epsilon} + b$.

    After centring, a token has norm $\sqrt d$ (for $\epsilon = 0$, $g = 1$, $b = 0$).
    """

    gain: Float[Array, " d"] | None
    bias: Float[Array, " d"] | None
    eps: float = eqx.field(static=True, default=1e-12)

    def __init__(self, gain: ArrayLike | None = None, bias: ArrayLike | None = None, eps: float = 1e-12):
        self.gain = None if gain is None else jnp.asarray(gain)
        self.bias = None if bias is None else jnp.asarray(bias)
        self.eps = eps

    def __call__(self, x):
        xc = x - jnp.mean(x, axis=-1, keepdims=True)
        std = jnp.sqrt(jnp.mean(xc**2, axis=-1) + self.eps)
        # With eps > 0 the definition holds for every row (a zero row maps to the bias, as in
        # BERT): divide by std itself. Only eps = 0 leaves a zero row undefined.
        y = _scale_defined(xc, std) if self.eps > 0 else _safe_scale(xc, std, 1.0)[0]
        # Degenerate = no spread across features (eps hides it from the division, not from us).
        bad = _degenerate_rows(jnp.linalg.norm(xc, axis=-1)) | (
            jnp.linalg.norm(xc, axis=-1) <= 16 * jnp.finfo(x.dtype).eps * jnp.linalg.norm(x, axis=-1)
        )
        if self.gain is not None:
            y = y * self.gain[None, :]
        if self.bias is not None:
            y = y + self.bias[None, :]
        return y, bad


def make_norm(name: str, d: int | None = None, *, radius: float | None = None) -> AbstractNorm:
    """Build a normalisation by CLI name.

    ``sphere`` (the paper's, radius 1 unless given), ``rms`` or ``layernorm``.
    """
    if name == "sphere":
        return SphereNorm(1.0 if radius is None else radius)
    if name == "rms":
        return RMSNorm()
    if name == "layernorm":
        return LayerNorm()
    raise UsageError(f"unknown normalisation {name!r}; expected one of {', '.join(LN_NAMES)}.")


def qk_normalise(q: Float[Array, "*heads n k"]) -> Float[Array, "*heads n k"]:
    r"""QK-norm: each query (or key) row RMS-normalised without a gain, $q \mapsto q / \mathrm{rms}(q)$.

    Every row then has $|q| = \sqrt{d_{QK}}$ ($d_{QK}$ the key width), so $q \cdot k / \sqrt{d_{QK}}$
    lies in $[-\sqrt{d_{QK}}, \sqrt{d_{QK}}]$ and the temperature alone sets how sharp $A$ can be.
    A zero row (a token with no query or key) stays zero: its scores are 0, uniform attention.
    """
    rms = jnp.sqrt(jnp.mean(q**2, axis=-1, keepdims=True))
    tiny = jnp.finfo(q.dtype).tiny
    return q / jnp.where(rms <= tiny, 1.0, rms)


def check_ngpt_norms(*norms: AbstractNorm | None) -> None:
    """nGPT lives on the sphere: every normalisation given must be a `SphereNorm` (ValueError)."""
    for nm in norms:
        if nm is not None and not isinstance(nm, SphereNorm):
            raise UsageError(
                f"placement='ngpt' normalises onto the sphere: the norm must be a SphereNorm, got "
                f"{type(nm).__name__} (ln='sphere')."
            )
