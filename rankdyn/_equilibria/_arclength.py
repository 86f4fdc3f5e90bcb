r"""Pseudo-arclength continuation of equilibria $F_p(X) = X$ on the product of spheres.

The unknowns are the tokens $X$ and the parameter $p$. At a point $X$ the equation is posed in the
tangent coordinates of $(\mathbb S^{d-1})^n$ (`tangent_basis` $B$, as `stability` does), on the
slice $Q$ orthogonal to the orbits of the continuous symmetries (`_quotient`):

$$G(X, p) = B^\top\big(F_p(X) - X\big) = 0,\qquad
N(X, p) = \dot X_k^\top (X - X_k) + \dot p_k\,(p - p_k) - \Delta s = 0,$$

with $(\dot X_k, \dot p_k)$ the unit branch tangent at the last point (the null vector of
$[\,G_X Q,\ G_p\,]$, $G_X = B^\top DF_p B - I$). The predictor is $X_k + \Delta s\,\dot X_k$
(retracted onto the spheres), $p_k + \Delta s\,\dot p_k$; the corrector is Newton on the
bordered system

$$\begin{pmatrix} G_X Q & G_p \\ \dot X_k^\top B Q & \dot p_k \end{pmatrix}
\begin{pmatrix}\delta w\\ \delta p\end{pmatrix} = -\begin{pmatrix} G \\ N\end{pmatrix},
\qquad X \leftarrow \mathrm{retract}(X + BQ\,\delta w),\ p \leftarrow p + \delta p,$$

solved in the least-squares sense (a minimum-norm step where the system is singular: at a
branch point, or along a degenerate root such as the paper's first token). Because $p$ is an
unknown, the branch turns at a fold (where $\dot p$ changes sign) instead of ending there, which
natural-parameter stepping cannot do. The step $\Delta s$ grows after
quick Newton convergence and halves after a failure or a tangent turning by more than
``max_turn``.

$\partial_p F_p$ is the JVP of the layer along $\partial_p$ of its floating-point arrays,
taken by a central difference of ``family(p \pm h)``: exact to rounding for arrays affine in
$p$ (``w`` in $W_V$, the temperature $d_{QK}$, which the layer stores as an array), $O(h^2)$
otherwise. Only the parameter derivative is differenced; $DF$ is exact (``jax.jacfwd``). For
layers off the unit sphere product (`on_unit_spheres`: pre-LN, no LN, affine or RMS LN, another
radius) $B = I$ and there is no retraction (the full space).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._norms import SphereNorm
from .._model._placements import fixed_point_layer
from .._observe._tolerances import default_residual_tol
from . import MAX_STATE
from ._linearise import tangent_basis
from ._quotient import orbit_complement
from ._stability import block_eigvals, cluster_means

__all__ = ["Family", "LayerFamily", "Point", "evaluate", "correct", "tangent_at", "on_unit_spheres"]


@eqx.filter_jit
def _central_difference(plus, minus, h):
    """$(f(p + h) - f(p - h)) / 2h$ leaf by leaf (``h`` traced: one program for every step)."""
    return jax.tree.map(lambda a, b: (a - b) / (2 * h), plus, minus)


@eqx.filter_jit
def _residual(layer, x, t, period=1):
    r"""$\|F^k(X) - X\|_F$, one compiled program (the start's check)."""
    return jnp.linalg.norm(_compose(layer, x, t, period)[0] - x)


@runtime_checkable
class Family(Protocol):
    """What the corrector needs of a family: a `LayerFamily` or a `rankdyn._equilibria._maps.MapFamily`."""

    t: int
    period: int

    def linearise(self, x: np.ndarray, p: float) -> tuple: ...

    def on_spheres(self, p: float) -> bool: ...


def _scale(p: float) -> float:
    return max(abs(float(p)), 1e-3)


class LayerFamily:
    r"""A family ``p -> SelfAttentionLayer`` with the parameter derivative of its arrays.

    Arguments:
        family: the callable; every value must give a layer of the same structure.
        t: the layer index whose map is continued (a per-layer stack, e.g. a trained checkpoint).
        h: relative central-difference step of $\partial_p$ (``h * |p|``, or ``h * 1e-3`` near 0:
            a positive parameter such as the temperature stays positive).

    Raises:
        UsageError: if the layers differ in structure, or do not depend on ``p`` at all.
    """

    def __init__(
        self, family: Callable[[float], SelfAttentionLayer], h: float = 1e-5, t: int = 0, period: int = 1
    ):
        self.family = family
        self.h = float(h)
        self.t = int(t)
        self.period = int(period)

    def linearise(self, x: np.ndarray, p: float):
        """``(F^k(X) - X, D F^k, d_p F^k, ok)`` flattened, in float64 on the host, and whether the
        unit-sphere retraction applies (``k`` = ``period``)."""
        layer, dlayer = self.at(p)
        dt = layer.weights.w_v.dtype
        r, jac, fp, degen = (
            np.asarray(a, dtype=np.float64)
            for a in _pieces(layer, dlayer, jnp.asarray(x, dt), self.t, self.period)
        )
        ok = bool(
            np.all(np.isfinite(r)) and np.all(np.isfinite(jac)) and np.all(np.isfinite(fp)) and not degen
        )
        return r, jac, fp, ok, on_unit_spheres(layer)

    def on_spheres(self, p: float) -> bool:
        return on_unit_spheres(self(p))

    def __call__(self, p: float) -> SelfAttentionLayer:
        layer = self.family(float(p))
        if not isinstance(layer, SelfAttentionLayer):
            raise UsageError(
                f"family({p:g}) returned {type(layer).__name__}, not a SelfAttentionLayer: a layer family "
                "maps the parameter to a layer (for a map f(x, p) pass a 1-D x_start)."
            )
        return layer

    def at(self, p: float):
        """``(layer, d layer / dp)``: the layer and the derivative of its floating arrays."""
        h = self.h * _scale(p)
        layer = self.family(float(p))
        plus, minus = (eqx.filter(self.family(float(p) + s), eqx.is_inexact_array) for s in (h, -h))
        here = eqx.filter(layer, eqx.is_inexact_array)
        if jax.tree.structure(plus) != jax.tree.structure(here) or jax.tree.structure(minus) != (
            jax.tree.structure(here)
        ):
            raise UsageError(
                "the family must build layers of one structure at every parameter value (same shapes, "
                "heads, blocks and switches); only array values may depend on the parameter."
            )
        return layer, _central_difference(plus, minus, jnp.asarray(h))

    def reads_parameter(self, p: float) -> bool:
        r"""Whether the map changes with the parameter near ``p``: at a random point of the sphere
        product, $F_{p+\delta}(X) \ne F_{p-\delta}(X)$ with $\delta = 10^{-3}|p|$ ($10^{-6}$ near 0).
        An array may change while the map does not (the temperature under uniform attention)."""
        delta = 1e-3 * _scale(p)
        lo, hi = self.family(float(p) - delta), self.family(float(p) + delta)
        # The same program for both (two copies of the map in one program may be fused
        # differently and differ in the last bit, where equal maps must give exactly 0).
        return bool(
            np.max(np.abs(np.asarray(_probe_map(hi, self.t)) - np.asarray(_probe_map(lo, self.t)))) > 0
        )


@eqx.filter_jit
def _probe_map(layer, t):
    """$F(X)$ at a fixed random point of the sphere product: one compiled program for every
    layer of a family (same structure), so equal maps give bit-equal outputs."""
    x = jax.random.normal(jax.random.key(1), (layer.num_tokens, layer.dim), layer.weights.w_v.dtype)
    return layer(x / jnp.linalg.norm(x, axis=-1, keepdims=True), t)[0]


def _compose(layer, x, t, period):
    """$F^k(X)$ (``k`` = ``period``, the same shared-weight map each time) and whether a norm met a
    zero row on the way."""
    degenerate = jnp.zeros((), bool)
    for _ in range(period):  # period is static and small: the cycle's length
        x, info = layer(x, t)
        degenerate = degenerate | info.degenerate
    return x, degenerate


@eqx.filter_jit
def _pieces(layer, dlayer, x, t, period=1):
    """``F^k(X) - X``, $DF^k(X)$ and $\\partial_p F^k$ (JVP along the arrays' derivative), flattened."""
    n, d = x.shape
    dyn, static = eqx.partition(layer, eqx.is_inexact_array)

    def f_of(arrays):
        return _compose(eqx.combine(arrays, static), x, t, period)[0]

    with jax.default_matmul_precision("highest"):
        y, fp = jax.jvp(f_of, (dyn,), (dlayer,))
        jac = jax.jacfwd(lambda z: _compose(layer, z, t, period)[0])(x)
        degenerate = _compose(layer, x, t, period)[1]
    return (y - x).reshape(-1), jac.reshape(n * d, n * d), fp.reshape(-1), degenerate


@dataclasses.dataclass(frozen=True, eq=False)
class Point:
    """One corrected point of a branch with its linearisation (host-side NumPy).

    Attributes:
        x, p: the point and the parameter; ``residual`` $\\|F_p(X) - X\\|_F$.
        basis: $B$ ``(n d, m)``; ``q``: the slice $Q$ ``(m, m')``; ``sym``: orbit dimension $s'$.
        gx: $G_X Q$ ``(m, m')``; ``gp``: $G_p$ ``(m,)``; ``jt``: $B^\\top DF B$ ``(m, m)``.
        ok: the layer was finite and no LN met a zero row.
    """

    x: np.ndarray
    p: float
    residual: float
    basis: np.ndarray
    q: np.ndarray
    sym: int
    gx: np.ndarray
    gp: np.ndarray
    jt: np.ndarray
    g: np.ndarray
    ok: bool


def on_unit_spheres(layer: SelfAttentionLayer) -> bool:
    """Whether the layer's outputs lie on $(\\mathbb S^{d-1})^n$: post-LN with the paper's unit-sphere
    LN and no per-block norms. Affine or RMS LN, another radius, pre-LN or no LN: the full space."""
    w = layer.weights
    return (
        layer.placement == "post"
        and isinstance(layer.norm, SphereNorm)
        and w.norm_attn is None
        and w.norm_mlp is None
        and float(layer.norm.radius) == 1.0
    )


def _retract(x: np.ndarray, sphere: bool) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True) if sphere else x


def evaluate(fam: Family, x: np.ndarray, p: float, generators: np.ndarray) -> Point:
    """The residual and linearisation of the bordered system at ``(x, p)`` (``fam``: a `LayerFamily`
    or a `rankdyn._equilibria._maps.MapFamily`)."""
    r, jac, fp, ok, sphere = fam.linearise(x, p)
    basis = np.asarray(tangent_basis(jnp.asarray(x)), dtype=np.float64) if sphere else np.eye(x.size)
    if not ok:
        m = basis.shape[1]
        z = np.zeros((m, m))
        return Point(x, p, math.inf, basis, np.eye(m), 0, z, np.zeros(m), z, np.zeros(m), False)
    q, sym = orbit_complement(x, basis, generators)
    jt = basis.T @ jac @ basis
    gx = (jt - np.eye(jt.shape[0])) @ q
    return Point(
        x, float(p), float(np.linalg.norm(r)), basis, q, sym, gx, basis.T @ fp, jt, basis.T @ r, True
    )


@dataclasses.dataclass(frozen=True)
class Constraint:
    r"""The scalar equation $c_X^\top \mathrm{vec}(X) + c_p\,p = c_0$ that borders $G = 0$."""

    cx: np.ndarray
    cp: float
    c0: float

    def value(self, x: np.ndarray, p: float) -> float:
        return float(self.cx @ x.reshape(-1) + self.cp * p - self.c0)


def arclength_constraint(x0: np.ndarray, p0: float, tx: np.ndarray, tp: float, ds: float) -> Constraint:
    """$\\dot X^\\top (X - X_0) + \\dot p (p - p_0) = \\Delta s$."""
    return Constraint(tx, float(tp), float(tx @ x0.reshape(-1) + tp * p0 + ds))


def fixed_parameter(p: float, size: int) -> Constraint:
    """$p = $ ``p`` (a natural-parameter solve, for the start and the ends)."""
    return Constraint(np.zeros(size), 1.0, float(p))


@dataclasses.dataclass(frozen=True)
class Newton:
    """Corrector settings: ``max_iter`` iterations, success at ``tol`` on the residual and the
    constraint, ``rcond`` of the least-squares solve, ``max_step`` on one update's norm."""

    tol: float
    max_iter: int = 12
    rcond: float = 1e-10
    max_step: float = 0.5


def correct(
    fam: Family,
    x: np.ndarray,
    p: float,
    con: Constraint,
    generators: np.ndarray,
    newton: Newton,
) -> tuple[Point | None, int, str]:
    """Newton on the bordered system from ``(x, p)``.

    Returns:
        ``(point or None, iterations, reason)``: reason ``"ok"``, ``"nonfinite"`` or ``"diverged"``.
    """
    sphere = fam.on_spheres(p)
    step_norm = math.inf
    for it in range(newton.max_iter + 1):
        pt = evaluate(fam, x, p, generators)
        if not pt.ok:
            return None, it, "nonfinite"
        nval = con.value(x, p)
        small = pt.residual <= newton.tol and abs(nval) <= newton.tol
        # One more iteration after the tolerance is met: the located bifurcations need the
        # corrector's full (quadratic) accuracy, which costs a single step.
        if small and (step_norm <= 1e-9 or pt.residual <= 1e-3 * newton.tol):
            return pt, it, "ok"
        if it == newton.max_iter:
            return (pt, it, "ok") if small else (None, it, "diverged")
        bq = pt.basis @ pt.q
        a = np.block([[pt.gx, pt.gp[:, None]], [(con.cx @ bq)[None, :], np.array([[con.cp]])]])
        rhs = -np.concatenate([pt.g, [nval]])
        step = np.linalg.lstsq(a, rhs, rcond=newton.rcond)[0]
        step_norm = float(np.linalg.norm(step))
        if not np.isfinite(step_norm) or step_norm > newton.max_step:
            return None, it, "diverged"
        x = _retract(x + (bq @ step[:-1]).reshape(x.shape), sphere)
        p = p + float(step[-1])
    return None, newton.max_iter, "diverged"  # pragma: no cover (the loop returns)


def null_space(pt: Point, dim: int, rtol: float = 1e-7) -> tuple[np.ndarray, int]:
    """Right singular vectors of $[G_X Q, G_p]$ for its ``dim`` smallest singular values, and its
    numerical nullity (singular values below ``rtol`` times the largest)."""
    m = np.concatenate([pt.gx, pt.gp[:, None]], axis=1)
    _, sv, vt = np.linalg.svd(m, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(vt.shape[0] - sv.size)])
    nullity = int(np.sum(sv <= rtol * max(float(sv[0]), 1e-300)))
    return vt[-dim:].T, nullity


def tangent_at(pt: Point, prev: tuple[np.ndarray, float] | None, extra: int, direction: float = 1.0):
    r"""The unit branch tangent $(\dot X, \dot p)$ at ``pt`` (ambient ``(n d,)`` and scalar).

    The null space of $[G_X Q, G_p]$ has dimension ``1 + extra`` on a branch with ``extra``
    degenerate directions (and one more at a branch point); the tangent is the projection of the
    previous tangent ``prev`` onto it (so the branch goes straight through a branch point and
    keeps its orientation), or at the start the null vector with the largest $|\dot p|$, oriented
    so that $\operatorname{sign}\dot p = $ ``direction``.
    """
    v, _ = null_space(pt, 1 + extra)
    bq = pt.basis @ pt.q
    if prev is None:
        target = np.zeros(v.shape[0])
        target[-1] = direction
    else:
        target = np.concatenate([bq.T @ prev[0], [prev[1]]])
    t = v @ (v.T @ target)
    nrm = np.linalg.norm(t)
    if nrm < 1e-12:  # a fold at the very start (prev is None): any null vector will do
        t = v[:, -1]
        nrm = 1.0
    t = t / nrm
    return bq @ t[:-1], float(t[-1])


def reduced_multipliers(pt: Point, num_tokens: int) -> np.ndarray:
    """Eigenvalues of $Q^\\top J_T Q$ by decreasing modulus (token blocks when nothing is quotiented)."""
    if pt.sym == 0:
        eig = block_eigvals(pt.jt, num_tokens)
    else:
        eig = np.linalg.eigvals(pt.q.T @ pt.jt @ pt.q)
    return eig[np.argsort(-np.abs(eig), kind="stable")]


def is_stable(eig: np.ndarray, tol: float) -> bool:
    """Every cluster-averaged multiplier (`cluster_means`) has modulus $< 1 -$ ``tol``."""
    return bool(eig.size == 0 or np.all(np.abs(cluster_means(eig)) < 1 - tol))


def check_start(fam: LayerFamily, x, p: float, residual_tol: float | None) -> tuple[np.ndarray, float]:
    """The start as a float array, refused when it is non-finite, misshapen or not an equilibrium.

    Returns:
        ``(x, residual_tol)`` with the dtype's default tolerance filled in.

    Raises:
        UsageError: naming the residual and the tolerance when the start is not an equilibrium.
    """
    layer = fam(p)
    if layer.num_layers is not None and not (0 <= fam.t < layer.num_layers or layer.cycle):
        raise UsageError(f"t = {fam.t} is outside the layer stack's {layer.num_layers} layers.")
    if layer.num_layers is None and fam.t != 0 and layer.placement != "mix":  # one map: t would be ignored
        raise UsageError(
            f"t = {fam.t} selects a layer of a per-layer stack (or a depth of Mix-LN); this family's layer "
            "is one map: t = 0."
        )
    if layer.has_dropout:
        raise UsageError("dropout must be 0: a stochastic map has no equilibria to continue.")
    fixed_point_layer(layer, fam.t)  # peri and lns: refused, naming the reason
    x = np.asarray(x, dtype=np.float64)
    n, d = layer.num_tokens, layer.dim
    if n * d > MAX_STATE:
        raise UsageError(
            f"n * d = {n * d} is above {MAX_STATE}: the corrector forms dense (n d)^2 Jacobians and solves "
            "them on the host; continue a smaller layer (fewer tokens)."
        )
    if x.shape != (n, d):
        raise UsageError(f"x_start must be one equilibrium of shape (n, d) = ({n}, {d}), got {x.shape}.")
    if not np.all(np.isfinite(x)):
        raise UsageError("x_start has non-finite entries (NaN or inf): pass a finite equilibrium.")
    tol = default_residual_tol(layer.weights.w_v.dtype) if residual_tol is None else float(residual_tol)
    dt = layer.weights.w_v.dtype
    res = float(_residual(layer, jnp.asarray(x, dt), fam.t, fam.period))
    if not res <= tol:
        raise UsageError(
            f"x_start is not an equilibrium at p = {p:g}: ||F(X) - X||_F = {res:.3e} > residual_tol = "
            f"{tol:.1e}; solve it first (find_equilibria, equilibrium_census) or raise residual_tol."
        )
    return x, tol
