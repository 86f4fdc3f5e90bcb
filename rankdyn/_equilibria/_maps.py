r"""Any map $f(x, p)$ of a 1-D state as a family for `continue_branch` and `continue_curve`.

A plain JAX function ``f(x, p) -> x`` with ``x`` of shape ``(m,)`` is continued in the full space
$\mathbb R^m$ (no sphere, no continuous symmetry). Its $k$-th iterate

$$g_p(x) = f_p^{k}(x) = f_p(f_p(\cdots f_p(x)))$$

gives the cycles of period $k$ as fixed points $g_p(x) = x$; the multipliers of the cycle are the
eigenvalues of $Dg_p(x) = \prod_j Df_p(x_j)$. Unlike a layer family, $\partial_p g$ is exact
(a JVP in $p$), and so is $Dg$ (``jax.jacfwd``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._arguments import check_count
from .._errors import UsageError
from .._observe._tolerances import default_residual_tol

__all__ = ["MapFamily", "check_map_start", "check_period"]


#: The longest cycle continued: the k-th iterate is unrolled into one program (k calls of the map
#: traced), so its compile time and memory grow with k (period = 10**6 grew to 6 GB uncompiled).
MAX_PERIOD = 64


def check_period(period) -> int:
    """``period`` as an int in ``[1, MAX_PERIOD]``.

    Raises:
        UsageError: for a period below 1, above `MAX_PERIOD` or not an integer.
    """
    why = " (the k-th iterate is unrolled into one compiled program; follow a shorter cycle)"
    return check_count(period, "period", maximum=MAX_PERIOD, why=why)


def _programs(f: Callable, k: int):
    """The jitted $g = f^k$ and ``(g(x) - x, Dg, d_p g)`` of `MapFamily`."""

    def g(x, p):
        for _ in range(k):  # k is static: one program per period
            x = f(x, p)
        return x

    def pieces(x, p):
        with jax.default_matmul_precision("highest"):
            y, fp = jax.jvp(lambda q: g(x, q), (p,), (jnp.ones_like(p),))
            jac = jax.jacfwd(lambda z: g(z, p))(x)
        return y - x, jac, fp

    return jax.jit(g), jax.jit(pieces)


_cached_programs = functools.lru_cache(maxsize=16)(_programs)


class MapFamily:
    r"""``(x, p) -> f^k(x, p)`` with its linearisation, for the corrector of `_arclength`.

    Arguments:
        f: ``f(x, p) -> x``, a JAX-traceable map of an ``(m,)`` state and a scalar parameter.
        period: ``k``, the iterate whose fixed points are continued.
    """

    t = 0

    def __init__(self, f: Callable, period: int = 1):
        self.f = f
        self.period = check_period(period)
        try:  # one pair of programs per (map, period): a branch, its switch and its cycles share them
            self.g, self._pieces = _cached_programs(f, self.period)
        except TypeError:  # a map that cannot be hashed gets its own
            self.g, self._pieces = _programs(f, self.period)

    def _dtype(self):
        return jnp.asarray(0.0).dtype

    def linearise(self, x: np.ndarray, p: float):
        """``(g(x) - x, Dg, d_p g, ok, False)`` in float64 on the host (no sphere: the full space)."""
        dt = self._dtype()
        r, jac, fp = (
            np.asarray(a, dtype=np.float64) for a in self._pieces(jnp.asarray(x, dt), jnp.asarray(p, dt))
        )
        ok = bool(np.all(np.isfinite(r)) and np.all(np.isfinite(jac)) and np.all(np.isfinite(fp)))
        return r, jac, fp, ok, False

    def on_spheres(self, p: float) -> bool:
        return False

    def residual(self, x: np.ndarray, p: float) -> float:
        """$\\|g_p(x) - x\\|_2$."""
        dt = self._dtype()
        return float(np.linalg.norm(np.asarray(self.g(jnp.asarray(x, dt), jnp.asarray(p, dt))) - x))

    def reads_parameter(self, x: np.ndarray, p: float) -> bool:
        r"""Whether $g_{p+\delta} \ne g_{p-\delta}$ at ``x`` or beside it ($\delta = 10^{-3}|p|$)."""
        delta = 1e-3 * max(abs(p), 1e-3)
        dt = self._dtype()
        probe = np.random.default_rng(1).standard_normal(x.shape) * 0.1
        for z in (x, x + probe):
            z = jnp.asarray(z, dt)
            a, b = (np.asarray(self.g(z, jnp.asarray(p + s, dt))) for s in (delta, -delta))
            if np.max(np.abs(a - b)) > 0:
                return True
        return False


def check_map_start(fam: MapFamily, x, p: float, residual_tol: float | None) -> tuple[np.ndarray, float]:
    """The start of a map's branch, refused when non-finite, when ``f`` changes the state's shape, or
    when it is not a fixed point of $f^k$.

    Returns:
        ``(x, residual_tol)``.

    Raises:
        UsageError: naming what is wrong and the fix.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        raise UsageError("x_start is empty: pass one fixed point of shape (m,).")
    if not np.all(np.isfinite(x)):
        raise UsageError("x_start has non-finite entries (NaN or inf): pass a finite fixed point.")
    dt = fam._dtype()
    out = jax.eval_shape(fam.f, jax.ShapeDtypeStruct(x.shape, dt), jax.ShapeDtypeStruct((), dt))
    if getattr(out, "shape", None) != x.shape:
        raise UsageError(
            f"the map must return a state of the shape it is given: f(x, p) with x of shape {x.shape} "
            f"returned {getattr(out, 'shape', type(out).__name__)}."
        )
    tol = default_residual_tol(dt) if residual_tol is None else float(residual_tol)
    res = fam.residual(x, p)
    if not res <= tol:
        what = "f(x, p)" if fam.period == 1 else f"f^{fam.period}(x, p)"
        raise UsageError(
            f"x_start is not a fixed point of {what} at p = {p:g}: ||{what} - x|| = {res:.3e} > "
            f"residual_tol = {tol:.1e}; solve it first or raise residual_tol."
        )
    return x, tol


def finite_parameter(value, name: str) -> float:
    """``value`` as a finite float.

    Raises:
        UsageError: for NaN or an infinite value.
    """
    v = float(value)
    if not math.isfinite(v):
        raise UsageError(f"{name} must be finite, got {v}.")
    return v


class PlainMap2:
    """``f2(x, p, q)`` as the map of `continue_curve` (no host-side data: ``aux`` is None)."""

    def __init__(self, f2: Callable):
        self.f2 = f2

    # Equal for one ``f2``: the curve's programs (compiled for this map, or taking it as a static
    # argument) then serve every curve of that map.
    def __eq__(self, other):
        return isinstance(other, PlainMap2) and other.f2 == self.f2

    def __hash__(self):
        return hash((PlainMap2, self.f2))

    def __call__(self, x, p, q, aux):
        return self.f2(x, p, q)

    def aux(self, p: float, q: float):
        return None


class LayerMap2:
    r"""A family ``(p, q) -> SelfAttentionLayer`` as a map of $\mathbb R^{nd}$ for `continue_curve`.

    Around the current $(p_c, q_c)$ the layer's arrays are taken affine in the parameters,
    $\theta(p, q) = \theta_c + (p - p_c)\,\partial_p\theta + (q - q_c)\,\partial_q\theta$, with the
    derivatives by central differences of the family (exact for arrays affine in a parameter, such
    as ``w`` in $W_V$); ``aux`` recomputes them at every Newton iterate. The state is the flattened
    token matrix: at a fixed point of a post-LN layer $DF$ maps into the tangent space of the
    spheres, so the full-space multipliers are the tangent ones and a zero per token, and the
    fold / period-doubling / Neimark-Sacker conditions are those of the tangent space.

    Arguments:
        family: ``(p, q) -> SelfAttentionLayer`` of one structure.
        p, q: where the family is first built (its structure and the state's shape).
        t: the layer index, for a per-layer stack.
        h: relative central-difference step.
    """

    def __init__(self, family: Callable, p: float, q: float, t: int = 0, h: float = 1e-5):
        import equinox as eqx

        self.family, self.t, self.h = family, int(t), float(h)
        self.layer0 = family(float(p), float(q))
        self.static = eqx.partition(self.layer0, eqx.is_inexact_array)[1]
        self.shape = (self.layer0.num_tokens, self.layer0.dim)

    def _arrays(self, p: float, q: float):
        import equinox as eqx

        return eqx.filter(self.family(float(p), float(q)), eqx.is_inexact_array)

    def aux(self, p: float, q: float):
        p, q = float(p), float(q)
        hp, hq = self.h * max(abs(p), 1e-3), self.h * max(abs(q), 1e-3)
        base = self._arrays(p, q)
        dp = jax.tree.map(lambda a, b: (a - b) / (2 * hp), self._arrays(p + hp, q), self._arrays(p - hp, q))
        dq = jax.tree.map(lambda a, b: (a - b) / (2 * hq), self._arrays(p, q + hq), self._arrays(p, q - hq))
        return base, dp, dq, jnp.asarray(p), jnp.asarray(q)

    def __call__(self, x, p, q, aux):
        import equinox as eqx

        base, dp, dq, pc, qc = aux
        arrays = jax.tree.map(lambda a, b, c: a + (p - pc) * b + (q - qc) * c, base, dp, dq)
        layer = eqx.combine(arrays, self.static)
        return layer(x.reshape(self.shape), self.t)[0].reshape(-1)
