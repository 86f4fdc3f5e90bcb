r"""Normal-form coefficients of located bifurcations of fixed points of maps, from JAX derivatives.

At a fixed point $x^*$ of $g = f_p^k$ write $A = Dg(x^*)$ and the second and third derivatives as
multilinear forms $B(u, v) = D^2 g(x^*)[u, v]$, $C(u, v, w) = D^3 g(x^*)[u, v, w]$, taken by nested
``jax.jvp`` (complex arguments by expanding into real and imaginary parts). With $q$ the critical
eigenvector of $A$ and $p$ the adjoint one ($A^\top p = \bar\lambda p$), $\langle p, q\rangle =
\bar p^\top q = 1$ and $\|q\| = 1$, the coefficients of Kuznetsov, *Elements of Applied
Bifurcation Theory* (3rd ed., sec. 8.7.2; the formulas MatContM uses, `docs/theory.md`
"Normal forms") are

- fold ($\lambda = 1$): $a = \tfrac12\langle p, B(q, q)\rangle$ (no criticality; $q$ is oriented
  so that its largest entry is positive);
- period doubling ($\lambda = -1$): $b = \tfrac16\langle p, C(q,q,q) + 3B(q, (I - A)^{-1}B(q,q))
  \rangle$, supercritical (a stable cycle of twice the period is born) iff $b > 0$;
- Neimark--Sacker ($\lambda = e^{\pm i\theta}$):
  $d = \tfrac12\operatorname{Re}\big(e^{-i\theta}\langle p, C(q,q,\bar q)
  + 2B(q, (I - A)^{-1}B(q, \bar q)) + B(\bar q, (e^{2i\theta}I - A)^{-1}B(q, q))\rangle\big)$, the
  first Lyapunov coefficient, supercritical (a stable invariant circle) iff $d < 0$;
- branch point ($\lambda = 1$ with $\partial_p g$ in the range of $A - I$): with the branch's
  tangent $t$ and $\hat q = (q, 0)$ in $(x, p)$, $c_{22} = \langle p, B(q, q)\rangle$ and
  $c_{12} = \langle p, D^2 G(t, \hat q)\rangle$, $G = g - x$ in $(x, p)$. Where the symmetry makes
  $c_{22} = 0$ (a pitchfork) the branching equation is $\beta(c_{12}\alpha + e\beta^2) = 0$ with
  $e = \tfrac16\langle p, C(q,q,q) + 3B(q, h)\rangle$, $(A - I)h = -B(q, q)$, $h \perp q$: the new
  branch lies where $c_{12}\alpha = -e\beta^2$, on the side where the critical multiplier exceeds 1
  iff $e < 0$: supercritical iff $e < 0$. Otherwise (transcritical) the coefficient is
  $\tfrac12 c_{22}$ and there is no criticality.

A coefficient within round-off of 0, $|c| \le 10^3\,\varepsilon_{\mathrm{dtype}}\, S$ with $S$ the
sum of the moduli of its terms ($\|p\|$ times the norms of the vectors paired with it), is
``"degenerate"``.

For a layer family the forms are those of the reduced map the multipliers use: the chart
$w \mapsto \mathrm{retract}(X^* + \mathrm{mat}(B Q w))$ of the sphere product on the slice $Q$
(`_arclength`, `_quotient`), inverted by the gnomonic projection $X_i \mapsto X_i / (X_i\cdot X^*_i)
- X^*_i$, so that its Jacobian at $w = 0$ is $Q^\top J_T Q$. The layer's arrays are taken affine in
the parameter (their central difference, as the corrector's $\partial_p$).
"""

from __future__ import annotations

import functools
import itertools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import UsageError
from ._branch import BIFURCATION_KINDS

__all__ = [
    "DEGENERATE_FACTOR",
    "Local",
    "branch_geometry",
    "criticality_of",
    "local_of",
    "normal_form",
]

#: A coefficient with $|c| \le$ DEGENERATE_FACTOR $\varepsilon S$ (module docstring) is degenerate.
DEGENERATE_FACTOR = 1e3

#: Rows of one batch of second / third derivatives (fixed: one compiled program per map and shape).
ROWS = 8

#: The derivative programs run a few times per located point, so their compile dominates: XLA's
#: cheapest optimisation level compiles the attention layer's third derivatives in about 2/3 of the
#: time (benchmarks/normal_form_cost.py), and the values are the same to rounding.
COMPILER_OPTIONS = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _derivatives(r, size, dtype, u2, v2, u3, v3, w3, with_jac=True, order=3):
    """$DR(0)$ (a placeholder 0 unless ``with_jac``: the continuation has it already) and the
    batches $D^2R(0)[u, v]$, $D^3R(0)[u, v, w]$ of ``r`` on $\\mathbb R^{size}$ (the third only for
    ``order`` 3: a fold needs none, and the program without it compiles faster)."""
    y0 = jnp.zeros(size, dtype)

    def d1(y, u):
        return jax.jvp(r, (y,), (u,))[1]

    def d2(y, u, v):
        return jax.jvp(lambda z: d1(z, u), (y,), (v,))[1]

    def d3(u, v, w):
        return jax.jvp(lambda z: d2(z, u, v), (y0,), (w,))[1]

    with jax.default_matmul_precision("highest"):
        jac = jax.jacfwd(r)(y0) if with_jac else jnp.zeros((), dtype)
        second = jax.vmap(lambda u, v: d2(y0, u, v))(u2, v2)
        third = jax.vmap(d3)(u3, v3, w3) if order == 3 else jnp.zeros((), dtype)
    return jac, second, third


@functools.partial(jax.jit, static_argnames=("f", "period", "order"), compiler_options=COMPILER_OPTIONS)
def _map_program(f, period, x0, p0, u2, v2, u3, v3, w3, order=3):
    m = x0.shape[0]

    def r(y):
        x, p = x0 + y[:m], p0 + y[m]
        z = x
        for _ in range(period):  # static: the cycle's length
            z = f(z, p)
        return z - x

    return _derivatives(r, m + 1, x0.dtype, u2, v2, u3, v3, w3, with_jac=False, order=order)


@functools.partial(eqx.filter_jit, compiler_options=COMPILER_OPTIONS)
def _layer_program(layer, dlayer, x0, bq, sphere, t, period, u2, v2, u3, v3, w3, order=3):
    dyn, static = eqx.partition(layer, eqx.is_inexact_array)
    n, d = x0.shape

    def chart(w):
        x = x0 + (bq @ w).reshape(n, d)
        return x / jnp.linalg.norm(x, axis=-1, keepdims=True) if sphere else x

    def chart_inv(x):
        if sphere:  # gnomonic: the inverse of the retraction on the tangent plane at x0
            x = x / jnp.sum(x * x0, axis=-1, keepdims=True)
        return bq.T @ (x - x0).reshape(-1)

    def r(y):
        w, mu = y[:-1], y[-1]
        arrays = jax.tree.map(lambda a, b: a + mu * b, dyn, dlayer)
        lay = eqx.combine(arrays, static)
        z = chart(w)
        for _ in range(period):
            z = lay(z, t)[0]
        return chart_inv(z) - w

    return _derivatives(r, bq.shape[1] + 1, x0.dtype, u2, v2, u3, v3, w3, with_jac=False, order=order)


class Local:
    r"""The derivatives at a fixed point of the residual $R(w, \mu) = g_{p^*+\mu}(w) - w$ in chart
    coordinates $y = (w, \mu) \in \mathbb R^{m+1}$.

    Arguments:
        program: ``(u2, v2, u3, v3, w3) -> (DR (m, m+1), D^2 R rows, D^3 R rows)`` (``ROWS`` each).
        m: the state's dimension in the chart; ``dtype``: the map's floating dtype.
        jac: $DR(0)$ when known (then the program's first output is ignored).
        order: 2 when no third derivative is asked for (a fold's program is then smaller), else 3;
            one value per `Local`, so that each point compiles at most one program.
    """

    def __init__(self, program, m: int, dtype, jac=None, order: int = 3):
        self.program, self.m, self.dtype, self.order = program, int(m), dtype, int(order)
        self.eps = float(np.finfo(dtype).eps)
        self._jac, self._known = jac, jac is not None

    def _pad(self, v: np.ndarray) -> np.ndarray:
        return v if v.size == self.m + 1 else np.concatenate([v, [0.0]])

    def _run(self, second: list, third: list):
        z = np.zeros((ROWS, self.m + 1))
        out2, out3, jac = [], [], None
        n = max(1, math.ceil(len(second) / ROWS), math.ceil(len(third) / ROWS))
        for k in range(n):
            s, t = second[k * ROWS : (k + 1) * ROWS], third[k * ROWS : (k + 1) * ROWS]
            u2, v2, u3, v3, w3 = (z.copy() for _ in range(5))
            for i, (u, v) in enumerate(s):
                u2[i], v2[i] = u, v
            for i, (u, v, w) in enumerate(t):
                u3[i], v3[i], w3[i] = u, v, w
            arrays = (jnp.asarray(a, self.dtype) for a in (u2, v2, u3, v3, w3))
            res = self.program(*arrays, order=self.order)
            jac, r2, r3 = (np.asarray(a, dtype=np.float64) for a in res)
            out2 += list(r2[: len(s)])
            out3 += list(r3[: len(t)]) if t else []
        if not self._known:
            self._jac = jac
        return out2, out3

    @property
    def jac(self) -> np.ndarray:
        """$DR(0)$, ``(m, m + 1)``: $[A - I,\\ \\partial_\\mu g]$."""
        if self._jac is None:
            self._run([], [])
        return self._jac

    def forms(self, second=(), third=()):
        r"""$D^2R[u, v]$ for each ``(u, v)`` in ``second`` and $D^3R[u, v, w]$ for each triple in
        ``third``; the vectors may be complex (expanded multilinearly into real parts) and of size
        ``m`` (then $\mu$-component 0) or ``m + 1``."""
        rows2, rows3, plan2, plan3 = [], [], [], []
        for terms, rows, plan in ((second, rows2, plan2), (third, rows3, plan3)):
            for vecs in terms:
                parts = []
                for v in vecs:
                    v = np.asarray(v)
                    opts = [(1.0, self._pad(np.real(v).astype(np.float64)))]
                    if np.iscomplexobj(v) and np.any(np.imag(v) != 0):
                        opts.append((1j, self._pad(np.imag(v).astype(np.float64))))
                    parts.append(opts)
                idx = []
                for combo in itertools.product(*parts):
                    idx.append((np.prod([c for c, _ in combo]), len(rows)))
                    rows.append(tuple(a for _, a in combo))
                plan.append(idx)
        r2, r3 = self._run(rows2, rows3)
        b = [sum(c * r2[i] for c, i in idx) for idx in plan2]
        c = [sum(c * r3[i] for c, i in idx) for idx in plan3]
        return b, c


def local_of(fam, pt) -> Local:
    """The `Local` derivatives at a corrected `Point` ``pt`` of a `LayerFamily` or a `MapFamily`."""
    from ._maps import MapFamily

    # The continuation has the Jacobian already: [Q^T J_T Q - I, Q^T G_p] in the chart.
    jac = np.concatenate([pt.q.T @ pt.jt @ pt.q - np.eye(pt.q.shape[1]), (pt.q.T @ pt.gp)[:, None]], axis=1)
    if isinstance(fam, MapFamily):
        dt = fam._dtype()
        x0, p0 = jnp.asarray(pt.x, dt), jnp.asarray(pt.p, dt)
        try:
            hash(fam.f)
            prog = functools.partial(_map_program, fam.f, fam.period, x0, p0)
        except TypeError:  # an unhashable callable: compiled for this call only
            raw = functools.partial(_map_program.__wrapped__, fam.f, fam.period, x0, p0)
            prog = jax.jit(raw, static_argnames="order", compiler_options=COMPILER_OPTIONS)
        return Local(prog, pt.x.size, dt, jac)
    from ._arclength import on_unit_spheres

    layer, dlayer = fam.at(pt.p)
    dt = layer.weights.w_v.dtype
    bq = pt.basis @ pt.q
    prog = functools.partial(
        _layer_program,
        layer,
        dlayer,
        jnp.asarray(pt.x, dt),
        jnp.asarray(bq, dt),
        on_unit_spheres(layer),
        fam.t,
        fam.period,
    )
    return Local(prog, bq.shape[1], dt, jac)


def _eigenpair(a: np.ndarray, target: complex | float):
    r"""$(\lambda, q, p)$: the eigenvalue of ``a`` nearest ``target``, its unit eigenvector $q$ and
    the adjoint $p$ ($A^\top p = \bar\lambda p$) with $\bar p^\top q = 1$."""
    lam, vr = np.linalg.eig(a)
    i = int(np.argmin(np.abs(lam - target)))
    q = vr[:, i] / np.linalg.norm(vr[:, i])
    lam_l, vl = np.linalg.eig(a.T)
    p = vl[:, int(np.argmin(np.abs(lam_l - np.conj(lam[i]))))]
    return lam[i], q, p / np.conj(np.vdot(p, q))


def _real_pair(a: np.ndarray, target: float):
    """A real eigenpair (`_eigenpair`), ``q`` oriented with its largest entry positive."""
    _, q, p = _eigenpair(a, target)
    q, p = np.real(q), np.real(p)
    s = 1.0 if q[np.argmax(np.abs(q))] >= 0 else -1.0
    q, p = s * q / np.linalg.norm(q), s * p
    return q, p / float(p @ q)


def criticality_of(coefficient: float, scale: float, eps: float, supercritical_if_positive: bool) -> str:
    """``"degenerate"`` within round-off of 0 (module docstring), else super- or subcritical."""
    if not math.isfinite(coefficient):
        return ""
    if abs(coefficient) <= DEGENERATE_FACTOR * eps * scale:
        return "degenerate"
    return "supercritical" if (coefficient > 0) == supercritical_if_positive else "subcritical"


def _nrm(v) -> float:
    return float(np.linalg.norm(v))


def fold_coefficient(local: Local) -> tuple[float, float]:
    r"""$(a, S)$: $a = \frac12\langle p, B(q, q)\rangle$ and its scale."""
    a = local.jac[:, : local.m] + np.eye(local.m)
    q, p = _real_pair(a, 1.0)
    (bqq,), _ = local.forms([(q, q)])
    return 0.5 * float(p @ bqq), 0.5 * _nrm(p) * _nrm(bqq)


def cubic_coefficient(local: Local, a: np.ndarray, q: np.ndarray, p: np.ndarray, bqq, bordered: bool):
    r"""$(\frac16\langle p, C(q,q,q) + 3B(q, h)\rangle, S)$, $h = (I - A)^{-1}B(q, q)$, or (``bordered``:
    at a multiplier 1) the solution $h \perp q$ of $(I - A)h = B(q, q)$ modulo $q$."""
    m = local.m
    if bordered:
        pn = p / np.linalg.norm(p)
        big = np.block([[np.eye(m) - a, pn[:, None]], [q[None, :], np.zeros((1, 1))]])
        h = np.linalg.solve(big, np.concatenate([bqq, [0.0]]))[:m]
    else:
        h = np.linalg.solve(np.eye(m) - a, bqq)
    (bqh,), (cqqq,) = local.forms([(q, h)], [(q, q, q)])
    value = (float(p @ cqqq) + 3 * float(p @ bqh)) / 6
    return value, _nrm(p) * (_nrm(cqqq) + 3 * _nrm(bqh)) / 6


def period_doubling_coefficient(local: Local) -> tuple[float, float]:
    """$(b, S)$ at a multiplier $-1$ (module docstring)."""
    a = local.jac[:, : local.m] + np.eye(local.m)
    q, p = _real_pair(a, -1.0)
    (bqq,), _ = local.forms([(q, q)])
    return cubic_coefficient(local, a, q, p, bqq, bordered=False)


def neimark_sacker_coefficient(local: Local, theta: float) -> tuple[float, float]:
    r"""$(d, S)$ at the pair $e^{\pm i\theta}$ (module docstring; $\langle q, q\rangle = 1$)."""
    m = local.m
    a = local.jac[:, :m] + np.eye(m)
    lam, q, p = _eigenpair(a, complex(np.cos(theta), abs(np.sin(theta))))
    th = float(np.angle(lam))
    (bqq, bqqc), _ = local.forms([(q, q), (q, np.conj(q))])
    h1 = np.linalg.solve(np.eye(m) - a, np.real(bqqc))
    h2 = np.linalg.solve(np.exp(2j * th) * np.eye(m) - a, bqq)
    (b1, b2), (c,) = local.forms([(q, h1), (np.conj(q), h2)], [(q, q, np.conj(q))])
    total = np.vdot(p, c + 2 * b1 + b2)
    d = 0.5 * float(np.real(np.exp(-1j * th) * total))
    return d, 0.5 * _nrm(p) * (_nrm(c) + 2 * _nrm(b1) + _nrm(b2))


def branch_geometry(local: Local, tangent: np.ndarray) -> dict:
    r"""The branching data at a branch point: the kernel of $DR = [A - I, \partial_\mu g]$ (the
    current branch's unit tangent ``t``, projected from ``tangent`` onto it, and ``phi`` the unit
    kernel vector orthogonal to it), the left null vector ``psi`` and the coefficients
    $c_{ij} = \langle\psi, D^2R[\phi_i, \phi_j]\rangle$ ($\phi_1 = t$, $\phi_2 = $ ``phi``), and the
    critical eigenvectors ``q``, ``p`` of $A$ at 1 with $\langle p, q\rangle = 1$."""
    m = local.m
    jac = local.jac
    u, _, vt = np.linalg.svd(jac)
    ker = vt[-2:].T  # (m + 1, 2): the tangent and the other branch's direction
    t = ker @ (ker.T @ tangent)
    t = t / np.linalg.norm(t)
    phi = ker[:, 0] - t * (t @ ker[:, 0])
    phi = (
        phi
        if np.linalg.norm(phi) > np.linalg.norm(ker[:, 1] - t * (t @ ker[:, 1]))
        else ker[:, 1] - t * (t @ ker[:, 1])
    )
    phi = phi / np.linalg.norm(phi)
    psi = u[:, -1]
    a = jac[:, :m] + np.eye(m)
    q, p = _real_pair(a, 1.0)
    (c11, c12, c22, bqq), _ = local.forms([(t, t), (t, phi), (phi, phi), (q, q)])
    return dict(
        t=t,
        phi=phi,
        psi=psi,
        c=(float(psi @ c11), float(psi @ c12), float(psi @ c22)),
        scale=_nrm(psi) * max(_nrm(c11), _nrm(c12), _nrm(c22)),
        q=q,
        p=p,
        a=a,
        bqq=bqq,
    )


def branch_point_coefficient(local: Local, tangent: np.ndarray) -> tuple[float, float, bool]:
    r"""$(c, S, \text{symmetric})$ at a branch point: the pitchfork's cubic coefficient $e$ where
    $c_{22}$ vanishes to $\sqrt\varepsilon$ relative to $c_{12}$ (the point is located to the
    corrector's tolerance, not to round-off), else $\frac12 c_{22}$ (module docstring)."""
    m = local.m
    vt = np.linalg.svd(local.jac)[2]
    ker = vt[-2:].T  # the followed tangent and the other branch's direction
    t = ker @ (ker.T @ tangent)
    a = local.jac[:, :m] + np.eye(m)
    q, p = _real_pair(a, 1.0)
    (bqq, c12v), _ = local.forms([(q, q), (t / np.linalg.norm(t), np.concatenate([q, [0.0]]))])
    c22, c12 = float(p @ bqq), float(p @ c12v)
    if abs(c22) <= math.sqrt(local.eps) * max(abs(c12), _nrm(p) * _nrm(bqq)):
        value, scale = cubic_coefficient(local, a, q, p, bqq, bordered=True)
        return value, scale, True
    return 0.5 * c22, 0.5 * _nrm(p) * _nrm(bqq), False


def normal_form(fam, pt, kind: str, *, theta: float = float("nan"), tangent=None) -> tuple[float, str]:
    r"""``(coefficient, criticality)`` of a located ``kind`` at the corrected point ``pt`` of ``fam``.

    ``tangent``: the branch tangent in the chart ``(m + 1,)`` (branch points only). The fold and a
    branch point without the $Z_2$ symmetry have no criticality (``""``)."""
    local = local_of(fam, pt)
    if kind == "fold":
        local.order = 2
        value, _ = fold_coefficient(local)
        return value, ""
    if kind == "period-doubling":
        value, scale = period_doubling_coefficient(local)
        return value, criticality_of(value, scale, local.eps, True)
    if kind == "neimark-sacker":
        value, scale = neimark_sacker_coefficient(local, theta)
        return value, criticality_of(value, scale, local.eps, False)
    if kind == "branch-point":
        value, scale, symmetric = branch_point_coefficient(local, tangent)
        return value, criticality_of(value, scale, local.eps, False) if symmetric else ""
    raise UsageError(f"no normal form for a {kind!r}; the kinds are {', '.join(BIFURCATION_KINDS)}.")
