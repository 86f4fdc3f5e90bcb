r"""Certificates for an equilibrium of the post-LN map: high precision, interval existence proof.

For the single-head post-LN layer with sphere LN (eq. 3),

$$F(X)_i = \frac{z_i}{\|z_i\|},\qquad z_i = \sum_{j \in \mathcal N_i} A_{ij}(X)\, (X W_V)_j,\qquad
A_{ij} = \frac{e^{s_{ij}}}{\sum_{k\in\mathcal N_i} e^{s_{ik}}},\quad
s_{ij} = \frac{x_i W_Q W_K^\top x_j^\top}{\sqrt{d_{QK}}},$$

with the float64 weights taken as exact rationals, a certificate of a point $\tilde X$ is:

- a Newton refinement of $G(X) = F(X) - X$ in mpmath (``dps`` digits) and the residual
  $\|G(\tilde X)\|_\infty$;
- the tangent multipliers (eigenvalues of $B^\top DF(\tilde X) B$, $B$ an orthonormal basis of the
  tangent space of $(\mathbb S^{d-1})^n$) at that precision;
- an interval **Krawczyk** test (mpmath.iv): with $\mathbf X = \tilde X + [-r, r]^{nd}$,
  $C \approx DG(\tilde X)^{-1}$ and $\mathbf J \supseteq \{DG(Y) : Y \in \mathbf X\}$,
  $$K = \tilde X - C\,G(\tilde X) + (I - C\mathbf J)(\mathbf X - \tilde X)
  \subset \operatorname{int}\mathbf X$$
  proves that $\mathbf X$ holds exactly one zero of $G$, i.e. one equilibrium within $r$ of
  $\tilde X$ in the max-norm. ($DF$ maps into the tangent space, so $DG = DF - I$ is singular
  only if 1 is a multiplier; a stable point has none.)
- an interval bound on the spectral radius (`stability_bound`): with $\mathbf M \supseteq
  \{DF(Y) : Y \in \mathbf X\}$, $V$ approximate eigenvectors of its midpoint and $W \approx V^{-1}$,
  $P = WV$ and $\delta = \|I - P\|_\infty < 1$, the matrix $C = V^{-1} DF(X^*) V = P^{-1} Q$,
  $Q \in W \mathbf M V$, has $|C_{ij}| \le |Q_{ij}| + \frac{\delta}{1-\delta}\sum_k |Q_{kj}|$, so by
  Gershgorin $\rho(DF(X^*)) \le \max_i \sum_j \sup |C_{ij}|$ at the equilibrium $X^*$ of the box.
  ($DF$ maps into the tangent space, so its spectrum is the tangent multipliers and zeros: a bound
  below 1 proves linear stability on $(\mathbb S^{d-1})^n$.)

Derivatives come from a small forward-mode dual number over mpmath numbers or intervals
(`_Dual`), so the interval Jacobian encloses the true one over the whole box. Used by the
``undirected`` target for every stable rank >= 2 equilibrium it reports.
"""

from __future__ import annotations

import mpmath

__all__ = [
    "refine",
    "krawczyk",
    "tangent_multipliers",
    "stability_bound",
    "certify",
    "prove",
    "layer_weights",
    "weights_from_hex",
]


class _Dual:
    """``v + g . eps`` with a gradient vector ``g`` (a list): forward-mode derivatives."""

    __slots__ = ("v", "g")

    def __init__(self, v, g):
        self.v, self.g = v, g

    def __add__(self, o):
        if isinstance(o, _Dual):
            return _Dual(self.v + o.v, [a + b for a, b in zip(self.g, o.g)])
        return _Dual(self.v + o, self.g)

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, _Dual):
            return _Dual(self.v - o.v, [a - b for a, b in zip(self.g, o.g)])
        return _Dual(self.v - o, self.g)

    def __mul__(self, o):
        if isinstance(o, _Dual):
            return _Dual(self.v * o.v, [self.v * b + o.v * a for a, b in zip(self.g, o.g)])
        return _Dual(self.v * o, [a * o for a in self.g])

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, _Dual):
            inv = 1 / o.v
            q = self.v * inv
            return _Dual(q, [(a - q * b) * inv for a, b in zip(self.g, o.g)])
        return _Dual(self.v / o, [a / o for a in self.g])


def _exp(ctx, x):
    if isinstance(x, _Dual):
        e = ctx.exp(x.v)
        return _Dual(e, [e * a for a in x.g])
    return ctx.exp(x)


def _sqrt(ctx, x):
    if isinstance(x, _Dual):
        r = ctx.sqrt(x.v)
        h = 1 / (2 * r)
        return _Dual(r, [h * a for a in x.g])
    return ctx.sqrt(x)


def _layer_map(ctx, x, w):
    """F(x) for ``x`` a list of n lists of d numbers (ctx numbers or `_Dual`); ``w`` from `_weights_in`."""
    n, d = len(x), len(x[0])
    mask, qk, wv = w["mask"], w["qk"], w["w_v"]
    xv = [[sum((x[i][a] * wv[a][b] for a in range(d)), 0 * x[i][0]) for b in range(d)] for i in range(n)]
    q = [[sum((x[i][a] * qk[a][b] for a in range(d)), 0 * x[i][0]) for b in range(d)] for i in range(n)]
    out = []
    for i in range(n):
        nb = [j for j in range(n) if mask[i][j]]
        # Softmax without the max shift: the scores are bounded by ||W_Q W_K^T|| / sqrt(d_QK).
        e = [_exp(ctx, sum((q[i][b] * x[j][b] for b in range(d)), 0 * x[i][0])) for j in nb]
        tot = sum(e[1:], e[0])
        z = [sum((e[k] * xv[j][b] for k, j in enumerate(nb)), 0 * x[i][0]) / tot for b in range(d)]
        nrm = _sqrt(ctx, sum((c * c for c in z[1:]), z[0] * z[0]))
        out.append([c / nrm for c in z])
    return out


def _weights_in(ctx, weights: dict) -> dict:
    """The exact float64 weights as ctx numbers; ``qk = W_Q W_K^T / sqrt(d_QK)`` in ctx arithmetic."""
    wq = [[ctx.mpf(v) for v in row] for row in weights["w_q"]]
    wk = [[ctx.mpf(v) for v in row] for row in weights["w_k"]]
    d, dk = len(wq), len(wq[0])
    scale = 1 / ctx.sqrt(ctx.mpf(weights["dqk"]))
    qk = [
        [sum((wq[a][c] * wk[b][c] for c in range(dk)), ctx.mpf(0)) * scale for b in range(d)]
        for a in range(d)
    ]
    return {
        "mask": [[bool(v) for v in row] for row in weights["mask"]],
        "qk": qk,
        "w_v": [[ctx.mpf(v) for v in row] for row in weights["w_v"]],
    }


def _residual_and_jacobian(ctx, x, w):
    """``(G(x) as a flat list, DG(x) as a list of rows)`` with G = F - id, by forward mode."""
    n, d = len(x), len(x[0])
    m = n * d
    zero, one = ctx.mpf(0), ctx.mpf(1)
    dual = [
        [_Dual(x[i][a], [one if k == i * d + a else zero for k in range(m)]) for a in range(d)]
        for i in range(n)
    ]
    fx = _layer_map(ctx, dual, w)
    flat = [fx[i][a] for i in range(n) for a in range(d)]
    g = [flat[k].v - x[k // d][k % d] for k in range(m)]
    jac = [[flat[r].g[c] - (one if r == c else zero) for c in range(m)] for r in range(m)]
    return g, jac


def layer_weights(layer) -> dict:
    """The float64 numbers that define ``layer``'s map: mask, ``w_q``, ``w_k``, ``w_v``, ``dqk``."""
    import numpy as np

    return {
        "mask": np.asarray(layer.mask).astype(bool).tolist(),
        "w_q": np.asarray(layer.weights.w_q[0], dtype=np.float64).tolist(),
        "w_k": np.asarray(layer.weights.w_k[0], dtype=np.float64).tolist(),
        "w_v": np.asarray(layer.weights.w_v[0], dtype=np.float64).tolist(),
        "dqk": float(layer.dqk),
    }


def _hex(v):
    return [_hex(a) for a in v] if isinstance(v, list) else float(v).hex()


def weights_from_hex(h: dict) -> dict:
    """Inverse of the ``weights`` entry of a certificate (exact float64 hex strings)."""
    unhex = lambda v: [unhex(a) for a in v] if isinstance(v, list) else float.fromhex(v)  # noqa: E731
    return {"mask": h["mask"], **{k: unhex(h[k]) for k in ("w_q", "w_k", "w_v", "dqk")}}


def refine(x, weights: dict, *, dps: int = 50, max_iter: int = 30):
    r"""Newton's method on $G = F - \mathrm{id}$ at ``dps`` digits from ``x`` (e.g. float64 tokens).

    Returns:
        ``(point as a list of lists of mpf, max-norm residual, iterations)``.
    """
    with mpmath.workdps(dps):
        w = _weights_in(mpmath.mp, weights)
        n, d = len(x), len(x[0])
        cur = [[mpmath.mpf(v) for v in row] for row in x]
        tol = mpmath.mpf(10) ** (-(dps - 5))
        it = 0
        for it in range(1, max_iter + 1):
            g, jac = _residual_and_jacobian(mpmath.mp, cur, w)
            step = mpmath.lu_solve(mpmath.matrix(jac), mpmath.matrix(g))
            cur = [[cur[i][a] - step[i * d + a] for a in range(d)] for i in range(n)]
            if max(abs(s) for s in step) < tol:
                break
        g, _ = _residual_and_jacobian(mpmath.mp, cur, w)
        return cur, max(abs(v) for v in g), it


def krawczyk(x, weights: dict, radius, *, dps: int = 50) -> dict:
    r"""Interval Krawczyk test of the box ``x + [-radius, radius]`` (see the module docstring).

    Arguments:
        x: the centre (numbers or decimal strings; a list of n lists of d).
        weights: `layer_weights` (float64 values, used exactly).
        radius: the half-width r of the box in the max-norm (a number or a decimal string).
        dps: working precision of the interval arithmetic.

    Returns:
        ``{"proven": bool, "radius": str, "margin": str}``: ``proven`` iff K lies in the open
        box; ``margin`` is the smallest distance of K to the box boundary relative to r
        (positive when proven).
    """
    iv = mpmath.iv
    with mpmath.workdps(dps):
        old = iv.dps
        iv.dps = dps
        try:
            n, d = len(x), len(x[0])
            centre = [[mpmath.mpf(v) for v in row] for row in x]
            r = mpmath.mpf(radius)
            w = _weights_in(iv, weights)
            thin = [[iv.mpf(c) for c in row] for row in centre]
            box = [[iv.mpf([c - r, c + r]) for c in row] for row in centre]
            g, _ = _residual_and_jacobian(iv, thin, w)
            _, jbox = _residual_and_jacobian(iv, box, w)
            # C: a float inverse of the midpoint Jacobian (any C is valid; a good one makes K small).
            mid = mpmath.matrix([[j.mid for j in row] for row in jbox])
            c = mpmath.inverse(mid)
            m = n * d
            ci = [[iv.mpf(c[a, b]) for b in range(m)] for a in range(m)]
            dev = iv.mpf([-r, r])
            margin = None
            ok = True
            for a in range(m):
                cg = sum((ci[a][b] * g[b] for b in range(m)), iv.mpf(0))
                row = [
                    (1 if a == b else 0) - sum((ci[a][k] * jbox[k][b] for k in range(m)), iv.mpf(0))
                    for b in range(m)
                ]
                k = iv.mpf(centre[a // d][a % d]) - cg + sum((row[b] * dev for b in range(m)), iv.mpf(0))
                lo, hi = centre[a // d][a % d] - r, centre[a // d][a % d] + r
                gap = min(mpmath.mpf(k.a) - lo, hi - mpmath.mpf(k.b)) / r
                margin = gap if margin is None else min(margin, gap)
                ok = ok and gap > 0
            return {"proven": bool(ok), "radius": mpmath.nstr(r, 6), "margin": mpmath.nstr(margin, 6)}
        finally:
            iv.dps = old


def tangent_multipliers(x, weights: dict, *, dps: int = 50) -> list:
    r"""Eigenvalues of $B^\top DF(x) B$ at ``dps`` digits (Householder tangent bases per token),
    sorted by decreasing modulus."""
    with mpmath.workdps(dps):
        w = _weights_in(mpmath.mp, weights)
        pt = [[mpmath.mpf(v) for v in row] for row in x]
        n, d = len(pt), len(pt[0])
        _, jac = _residual_and_jacobian(mpmath.mp, pt, w)
        m = n * d
        df = mpmath.matrix(jac) + mpmath.eye(m)
        basis = mpmath.zeros(m, n * (d - 1))
        for i in range(n):
            u = mpmath.matrix(pt[i])
            u = u / mpmath.norm(u)
            sgn = 1 if u[0] >= 0 else -1
            v = u.copy()
            v[0] += sgn
            h = mpmath.eye(d) - 2 * (v * v.T) / (v.T * v)[0]
            for a in range(d):
                for b in range(1, d):
                    basis[i * d + a, i * (d - 1) + b - 1] = h[a, b]
        jt = basis.T * df * basis
        eig = mpmath.eig(jt, left=False, right=False)
        return sorted(eig, key=lambda z: -abs(z))


def stability_bound(x, weights: dict, radius, *, dps: int = 50) -> dict:
    r"""Rigorous upper bound on $\rho(DF(X^*))$ for every $X^*$ in the box ``x + [-radius, radius]``.

    The interval Jacobian over the box, a similarity by approximate eigenvectors with a
    rigorously enclosed inverse, then Gershgorin (module docstring): every eigenvalue of
    $DF(Y)$, $Y$ in the box, has modulus at most the bound.

    Arguments:
        x: the centre (numbers or decimal strings; a list of n lists of d).
        weights: `layer_weights` (float64 values, used exactly).
        radius: the half-width of the box in the max-norm.
        dps: working precision.

    Returns:
        ``{"bound": str, "delta": str}``: the bound (upper end of an interval, 20 digits) and
        $\delta = \|I - WV\|_\infty$ (``bound`` is ``"inf"`` when $\delta \ge 1$).
    """
    iv = mpmath.iv
    with mpmath.workdps(dps):
        old = iv.dps
        iv.dps = dps
        try:
            centre = [[mpmath.mpf(v) for v in row] for row in x]
            r = mpmath.mpf(radius)
            w = _weights_in(iv, weights)
            box = [[iv.mpf([c - r, c + r]) for c in row] for row in centre]
            _, jbox = _residual_and_jacobian(iv, box, w)
            m = len(jbox)
            dfm = [[jbox[a][b] + (1 if a == b else 0) for b in range(m)] for a in range(m)]
            _, vec = mpmath.eig(mpmath.matrix([[e.mid for e in row] for row in dfm]))
            inv = mpmath.inverse(vec)
            cx = lambda z: iv.mpc(mpmath.re(z), mpmath.im(z))  # noqa: E731 - exact at this precision
            vi = [[cx(vec[a, b]) for b in range(m)] for a in range(m)]
            wi = [[cx(inv[a, b]) for b in range(m)] for a in range(m)]
            zero = iv.mpc(0, 0)
            mv = [[sum((dfm[a][k] * vi[k][b] for k in range(m)), zero) for b in range(m)] for a in range(m)]
            q = [[sum((wi[a][k] * mv[k][b] for k in range(m)), zero) for b in range(m)] for a in range(m)]
            p = [[sum((wi[a][k] * vi[k][b] for k in range(m)), zero) for b in range(m)] for a in range(m)]
            sup = lambda z: iv.mpf(abs(z).b)  # noqa: E731 - upper end of |z|, an exact point interval
            # Every sum below is formed in interval arithmetic, its upper end taken: rounded up.
            delta = max(
                sum((sup(p[a][b] - (1 if a == b else 0)) for b in range(m)), iv.mpf(0)).b for a in range(m)
            )
            if delta >= 1:
                return {"bound": "inf", "delta": mpmath.nstr(delta, 6)}
            eps = iv.mpf((iv.mpf(delta) / (1 - iv.mpf(delta))).b)
            qs = [[sup(q[a][b]) for b in range(m)] for a in range(m)]
            col = [sum((qs[k][b] for k in range(m)), iv.mpf(0)) for b in range(m)]
            bound = max(sum((qs[a][b] + eps * col[b] for b in range(m)), iv.mpf(0)).b for a in range(m))
            return {"bound": mpmath.nstr(mpmath.mpf(bound), 20), "delta": mpmath.nstr(delta, 6)}
        finally:
            iv.dps = old


def prove(point, weights: dict, radius, *, dps: int = 50) -> dict:
    """The two interval proofs of a stored point: existence (`krawczyk`) and stability
    (`stability_bound` over the Krawczyk box).

    Returns:
        ``{"proven", "radius", "krawczyk_margin", "spectral_radius_bound", "stability_proven"}``:
        ``stability_proven`` is existence proven and the bound below 1.
    """
    kz = krawczyk(point, weights, radius, dps=dps)
    stab = stability_bound(point, weights, kz["radius"], dps=dps)
    return {
        "proven": kz["proven"],
        "radius": kz["radius"],
        "krawczyk_margin": kz["margin"],
        "spectral_radius_bound": stab["bound"],
        "stability_proven": bool(kz["proven"] and stab["bound"] != "inf" and mpmath.mpf(stab["bound"]) < 1),
    }


def certify(x, weights: dict, *, dps: int = 50, digits: int = 45, radius: str = "1e-30") -> dict:
    """Refine, prove and linearise one equilibrium; the JSON-ready ``certificate`` entry.

    Arguments:
        x: float64 tokens near the equilibrium (n x d).
        weights: `layer_weights` of the layer map.
        dps: working precision; digits: digits of the stored point; radius: Krawczyk box radius.

    Returns:
        dict with ``point`` (decimal strings), ``weights`` (float64 hex, mask as bools),
        ``radius``, ``residual``, ``newton_iterations``, ``multipliers`` (``[re, im]`` strings),
        ``spectral_radius``, ``method``, ``proven``, ``krawczyk_margin``, ``spectral_radius_bound``
        (`stability_bound` over the Krawczyk box), ``stability_proven`` (existence proven and the
        bound below 1), ``dps``.
    """
    pt, res, it = refine(x, weights, dps=dps)
    with mpmath.workdps(dps):
        point = [[mpmath.nstr(v, digits, strip_zeros=False) for v in row] for row in pt]
    pr = prove(point, weights, radius, dps=dps)
    mult = tangent_multipliers(point, weights, dps=dps)
    with mpmath.workdps(dps):
        rho = max(abs(z) for z in mult)
        mult_s = [[mpmath.nstr(mpmath.re(z), 20), mpmath.nstr(mpmath.im(z), 20)] for z in mult]
        rho_s, res_s = mpmath.nstr(rho, 20), mpmath.nstr(res, 6)
    return {
        "point": point,
        "weights": {"mask": weights["mask"], **{k: _hex(weights[k]) for k in ("w_q", "w_k", "w_v", "dqk")}},
        "radius": pr["radius"],
        "residual": res_s,
        "newton_iterations": it,
        "multipliers": mult_s,
        "spectral_radius": rho_s,
        "method": (
            f"Newton on F - id in mpmath at {dps} digits; interval Krawczyk test (mpmath.iv, forward-mode "
            "interval Jacobian over the box) of the max-norm box of this radius; tangent multipliers by "
            "mpmath.eig; "
            "spectral radius bounded over the box by eigenvector similarity (enclosed inverse) and Gershgorin"
        ),
        "proven": pr["proven"],
        "krawczyk_margin": pr["krawczyk_margin"],
        "spectral_radius_bound": pr["spectral_radius_bound"],
        "stability_proven": pr["stability_proven"],
        "dps": dps,
    }
