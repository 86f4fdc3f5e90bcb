r"""Any map $f(x, p)$ of a 1-D state as a family for `continue_branch` and `continue_curve`.

A plain JAX function ``f(x, p) -> x`` with ``x`` of shape ``(m,)`` is continued in the full space
$\mathbb R^m$ (no sphere, no continuous symmetry). Its $k$-th iterate

$$g_p(x) = f_p^{k}(x) = f_p(f_p(\cdots f_p(x)))$$

gives the cycles of period $k$ as fixed points $g_p(x) = x$; the multipliers of the cycle are the
eigenvalues of $Dg_p(x) = \prod_j Df_p(x_j)$. Unlike a layer family, $\partial_p g$ is exact
(a JVP in $p$), and so is $Dg$ (``jax.jacfwd``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import UsageError
from .._observe._tolerances import default_residual_tol

__all__ = ["MapFamily", "check_map_start", "check_period"]


def check_period(period) -> int:
    """``period`` as an int >= 1.

    Raises:
        UsageError: for a period below 1 or not an integer.
    """
    if isinstance(period, bool) or not float(period).is_integer() or int(period) < 1:
        raise UsageError(f"period must be an integer >= 1 (the length of the cycle), got {period!r}.")
    return int(period)


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
        k = self.period

        def g(x, p):
            for _ in range(k):  # k is static: one program per period
                x = f(x, p)
            return x

        def pieces(x, p):
            with jax.default_matmul_precision("highest"):
                y, fp = jax.jvp(lambda q: g(x, q), (p,), (jnp.ones_like(p),))
                jac = jax.jacfwd(lambda z: g(z, p))(x)
            return y - x, jac, fp

        self.g = jax.jit(g)
        self._pieces = jax.jit(pieces)

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
