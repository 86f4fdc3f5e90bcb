r"""Every equilibrium of the causal two-token layer in the plane, and its stability, on a grid.

For $n = d = 2$, the causal mask, one head and post-LN on the unit circle (eq. 3), token 1
attends only to itself: $x_1 = N(x_1 W_V)$, so $x_1$ is a unit left eigenvector of $W_V$ with
an eigenvalue $\lambda_e > 0$ (a **family**, one per such eigenvalue; its sign image $-x_1$ gives
the same classes, the map being odd). Its tangent multiplier is $\lambda_o / \lambda_e$, the
derivative of the induced map of directions at a fixed direction ($\lambda_o$: the other
eigenvalue). Given $x_1 = e$, token 2 moves on the circle, $u = (\cos\theta, \sin\theta)$:

$$v(\theta) = \big(a(\theta)\, e + (1 - a(\theta))\, u\big) W_V,\qquad
a = \big(1 + e^{s_{22} - s_{21}}\big)^{-1},\quad s_{2j} = \frac{(u W_Q)\cdot(x_j W_K)}{\sqrt{d_{QK}}},$$

and its equilibria are the roots of $u \times v(\theta) = 0$ with $u \cdot v > 0$ (where
$v \ne 0$), found by sign changes on ``num_angles`` angles and bisection. Its multiplier is the
derivative of $\theta \mapsto \arg v(\theta)$. The Jacobian is block triangular (causal), so
an equilibrium is stable when both multipliers have modulus below $1 - $ ``tol``.

Each equilibrium is a class by token 2's relation to token 1: ``same`` ($x_2 = x_1$, rank 1),
``opposite`` ($x_2 = -x_1$) or ``rank2``. `causal_pair_phases` counts, at every point of a
batch of weights, the equilibria of each family and relation and how many are stable: a phase
diagram in two parameters is that batch on a grid. Everything is NumPy (no compile).
"""

from __future__ import annotations

import math

import numpy as np

from .._errors import UsageError

__all__ = ["causal_pair_phases", "causal_pair_equilibria", "PAIR_RELATIONS"]

#: Token 2's relation to token 1, the last axis of `causal_pair_phases`' counts.
PAIR_RELATIONS = ("same", "opposite", "rank2")
#: Batch entries handled at once (memory: about 40 arrays of chunk * 2 * num_angles floats).
_CHUNK = 256


def _row(x0, x1, m):
    """The row vector ``(x0, x1)`` times the 2 x 2 matrices ``m`` ``(..., 2, 2)`` (broadcast over an
    extra last axis of ``x0, x1``): written out, which NumPy runs far faster than an einsum here."""
    return x0 * m[..., 0, 0, None] + x1 * m[..., 1, 0, None], x0 * m[..., 0, 1, None] + x1 * m[
        ..., 1, 1, None
    ]


def _token2(e, w_v, w_q, w_k, scale, theta):
    """``(u, v)``, each a pair of components ``(..., M)``: token 2 at angles ``theta`` ``(..., M)``
    and its image before the norm, token 1 at ``e`` ``(..., 2)``."""
    u0, u1 = np.cos(theta), np.sin(theta)
    q0, q1 = _row(u0, u1, w_q)
    k0, k1 = _row(u0, u1, w_k)
    e0, e1 = e[..., 0, None], e[..., 1, None]
    ek0, ek1 = _row(e0, e1, w_k)
    gap = q0 * (ek0 - k0) + q1 * (ek1 - k1)  # s21 - s22
    a = 0.5 * (1 + np.tanh(0.5 * scale[..., None] * gap))  # the logistic, overflow-free
    return (u0, u1), _row(a * e0 + (1 - a) * u0, a * e1 + (1 - a) * u1, w_v)


def _cross(u, v):
    return u[0] * v[1] - u[1] * v[0]


def causal_pair_phases(w_v, w_q, w_k, *, dqk=None, num_angles: int = 1024, tol: float = 1e-6) -> dict:
    r"""Equilibria of the causal $n = d = 2$ post-LN layer and their stability, for a batch of weights.

    Arguments:
        w_v, w_q, w_k: ``(..., 2, 2)`` the value, query and key matrices (one head,
            $d_{QK} = 2$ unless ``dqk``); broadcast against each other.
        dqk: the temperature $d_{QK}$ (default 2, the key width).
        num_angles: angles of token 2 scanned for sign changes.
        tol: an equilibrium is stable when both multipliers have modulus below $1 - tol$.

    Returns:
        dict with ``eigenvalues`` ``(..., 2)`` (token 1's families: the real positive eigenvalues of
        $W_V$, largest first; NaN where there is none), ``count`` and ``stable`` ``(..., 2, 3)``
        (equilibria with token 1 in family ``f`` and token 2 in relation `PAIR_RELATIONS` ``r``,
        one sign of $x_1$; and how many of them are stable), ``token1_multiplier`` ``(..., 2)``.

    Raises:
        UsageError: for matrices that are not ``(..., 2, 2)`` or not finite, ``num_angles < 16``,
            ``dqk <= 0`` or ``tol`` outside [0, 1).
    """
    w_v, w_q, w_k = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in (w_v, w_q, w_k)))
    if w_v.shape[-2:] != (2, 2):
        raise UsageError(f"w_v, w_q and w_k must be (..., 2, 2), got {w_v.shape}.")
    if not all(np.all(np.isfinite(a)) for a in (w_v, w_q, w_k)):
        raise UsageError("w_v, w_q and w_k must be finite (NaN or inf found).")
    d_qk = 2.0 if dqk is None else float(dqk)
    if not (math.isfinite(d_qk) and d_qk > 0):
        raise UsageError(f"dqk must be finite and > 0, got {dqk}.")
    if int(num_angles) < 16 or not (math.isfinite(tol) and 0 <= tol < 1):
        raise UsageError(f"need num_angles >= 16 and 0 <= tol < 1, got {num_angles} and {tol}.")
    batch = w_v.shape[:-2]
    flat = [a.reshape(-1, 2, 2) for a in (w_v, w_q, w_k)]
    parts = [
        _chunk(*(a[i : i + _CHUNK] for a in flat), d_qk, int(num_angles), tol)
        for i in range(0, flat[0].shape[0], _CHUNK)
    ]
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    return {k: v.reshape(batch + v.shape[1:]) for k, v in out.items()}


def causal_pair_equilibria(w_v, w_q, w_k, *, dqk=None, num_angles: int = 1024, tol: float = 1e-6) -> list:
    """The equilibria of one causal $n = d = 2$ post-LN layer (`causal_pair_phases` for one set of
    weights): dicts with ``family``, ``relation``, ``x`` ``(2, 2)``, ``multipliers`` (token 1's,
    token 2's) and ``stable``; one sign of $x_1$.

    Raises:
        UsageError: as `causal_pair_phases`, and for a batch of weights.
    """
    if np.shape(w_v) != (2, 2) or np.shape(w_q) != (2, 2) or np.shape(w_k) != (2, 2):
        raise UsageError("causal_pair_equilibria takes one (2, 2) w_v, w_q and w_k; use causal_pair_phases.")
    causal_pair_phases(w_v, w_q, w_k, dqk=dqk, num_angles=16, tol=tol)  # the checks
    d_qk = 2.0 if dqk is None else float(dqk)
    arrays = (np.asarray(a, dtype=np.float64)[None] for a in (w_v, w_q, w_k))
    return _chunk(*arrays, d_qk, int(num_angles), tol, points=True)["points"]


def _families(w_v):
    """Token 1's fixed directions: unit left eigenvectors ``(B, 2, 2)`` of the real positive
    eigenvalues ``(B, 2)`` (largest first, NaN where missing) and their tangent multipliers."""
    lam, vec = np.linalg.eig(np.swapaxes(w_v, -1, -2))  # x W_V = lam x  <=>  W_V^T x = lam x
    real = np.abs(lam.imag) <= 1e-12 * np.maximum(1.0, np.abs(lam))
    lam_r, vec_r = lam.real, np.swapaxes(vec.real, -1, -2)
    order = np.argsort(-np.where(real, lam_r, -np.inf), axis=-1)
    lam_r = np.take_along_axis(lam_r, order, -1)
    real = np.take_along_axis(real, order, -1)
    vec_r = np.take_along_axis(vec_r, order[..., None], -2)
    ok = real & (lam_r > 0) & real[..., ::-1]
    # A repeated eigenvalue (a Jordan block) has one fixed direction: one family, multiplier 1.
    ok[..., 1] &= ~np.isclose(lam_r[..., 0], lam_r[..., 1], rtol=1e-12, atol=0)
    other = lam_r[..., ::-1]
    mult = np.where(ok, np.abs(other) / np.where(ok, lam_r, 1.0), np.nan)
    e = vec_r / np.linalg.norm(vec_r, axis=-1, keepdims=True)
    return np.where(ok, lam_r, np.nan), e, ok, mult


def _chunk(w_v, w_q, w_k, d_qk, m, tol, points=False):
    b = w_v.shape[0]
    lam, e, ok, mult1 = _families(w_v)
    wv, wq, wk = (np.broadcast_to(a[:, None], (b, 2, 2, 2)) for a in (w_v, w_q, w_k))
    scale = np.full((b, 2), 1 / math.sqrt(d_qk))
    e = np.where(ok[..., None], e, np.array([1.0, 0.0]))
    # A grid offset by an irrational fraction of a step: no root lands on a grid angle.
    theta = (np.arange(m) + 0.5 * (math.sqrt(5) - 1)) * (2 * math.pi / m)
    theta = np.broadcast_to(theta, (b, 2, m))
    u, v = _token2(e, wv, wq, wk, scale, theta)
    h = _cross(u, v)
    lo_idx = np.nonzero(np.sign(h) != np.sign(np.roll(h, -1, axis=-1)))
    bi, fi, ti = lo_idx
    lo = theta[bi, fi, ti]
    hi = lo + 2 * math.pi / m
    e_r, wv_r, wq_r, wk_r, sc = e[bi, fi], wv[bi, fi], wq[bi, fi], wk[bi, fi], scale[bi, fi]

    def hval(t):
        uu, vv = _token2(e_r, wv_r, wq_r, wk_r, sc, t[:, None])
        return _cross(uu, vv)[:, 0]

    h_lo = hval(lo)
    for _ in range(36):  # bisection: the bracket shrinks to 2^-36 of a step (1e-13 rad for 1024)
        mid = 0.5 * (lo + hi)
        h_mid = hval(mid)
        left = np.sign(h_mid) == np.sign(h_lo)
        lo, h_lo = np.where(left, mid, lo), np.where(left, h_mid, h_lo)
        hi = np.where(left, hi, mid)
    root = 0.5 * (lo + hi)
    step = 1e-6
    us, vs = _token2(e_r, wv_r, wq_r, wk_r, sc, np.stack([root - step, root, root + step], axis=-1))
    us, vs = np.stack(us, axis=-1), np.stack(vs, axis=-1)  # (r, 3, 2)
    vn = np.linalg.norm(vs[:, 1], axis=-1)
    fixed = (np.sum(us[:, 1] * vs[:, 1], axis=-1) > 0) & (vn > 1e-9)
    ang = np.arctan2(vs[..., 1], vs[..., 0])
    d_ang = np.angle(np.exp(1j * (ang[:, 2] - ang[:, 0])))  # wrapped difference
    mult2 = np.abs(d_ang / (2 * step))
    ur = us[:, 1]
    rel = np.where(
        np.linalg.norm(ur - e_r, axis=-1) <= 1e-6,
        0,
        np.where(np.linalg.norm(ur + e_r, axis=-1) <= 1e-6, 1, 2),
    )
    keep = fixed & ok[bi, fi]
    stable = keep & (mult1[bi, fi] < 1 - tol) & (mult2 < 1 - tol)
    count = np.zeros((b, 2, 3), np.int64)
    nstable = np.zeros((b, 2, 3), np.int64)
    np.add.at(count, (bi[keep], fi[keep], rel[keep]), 1)
    np.add.at(nstable, (bi[stable], fi[stable], rel[stable]), 1)
    out = {"eigenvalues": lam, "count": count, "stable": nstable, "token1_multiplier": mult1}
    if points:
        x = np.stack([e_r, ur], axis=1)[keep]
        out["points"] = [
            {"family": int(f), "relation": PAIR_RELATIONS[r], "x": xi, "multipliers": (float(m1), float(m2)),
             "stable": bool(st)}
            for f, r, xi, m1, m2, st in zip(fi[keep], rel[keep], x, mult1[bi, fi][keep], mult2[keep],
                                            stable[keep], strict=True)
        ]  # fmt: skip
    return out
