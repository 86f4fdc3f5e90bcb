r"""Exact and complete equilibria of the paper's system: causal mask, uniform attention, $W_V = I + wS$.

With $W_Q = W_K = 0$ the causal attention is uniform, $A_{ij} = 1/i$ for $j \le i$, and the
post-LN fixed-point equation of token $i$ (eq. 3; the $1/i$ cancels under LN) reads

$$\lambda\, x = (s + x) W,\qquad \lambda = \|(s + x) W\|_2 > 0,\qquad s = \textstyle\sum_{j<i} X_j,$$

so each token is one problem given the earlier ones: the equilibria form a tree
(`docs/theory.md#constructions`). With $W = I + wS$ ($S$ the superdiagonal shift, row-vector
convention $(xS)_m = x_{m-1}$) the equation is $x\,(\mu I - wS) = sW$ with $\mu = \lambda - 1$:

* $\mu = 0$ (**chain step**, $\lambda = 1$): $-w\,x S = sW$ needs $s_1 = 0$ and gives
  $x_m = -(sW)_{m+1}/w$ for $m < d$ and $x_d = \pm\sqrt{1 - \sum_{m<d} x_m^2}$ (two, one or no
  real solutions). This branch holds the paper's closed forms (App. F.1).
* $\mu \ne 0$ (**root step**): $\mu I - wS$ is invertible, so
  $x(\mu) = sW\sum_{k\ge 0} w^k S^k/\mu^{k+1}$ and $\|x(\mu)\| = 1$ is one polynomial equation in
  one scalar. If the earlier tokens vanish in coordinates $< a$ (they do exactly: each chain
  step lowers $a$ by one, a root step keeps it), only the tail $a..d$ of size $K + 1$ matters
  and, with $\mu = w\nu$,

  $$Q(\nu) = \nu^{2K+2} - w^{-2}\,\Big\|\sum_{k=0}^{K} \nu^{K-k}\, (b S^k)\Big\|^2 = 0,
  \qquad b = (sW)_{a..d},$$

  of degree $2K + 2$ with $Q(0) = -w^{2K-2} b_1^2 \ne 0$; the real roots with
  $\lambda = 1 + w\nu > 0$ are the solutions.
* The first token ($s = 0$) solves $xW = \lambda x$: $x = \pm e_d$ exactly (the only left
  eigenvector of $W$); it is a root of multiplicity $d - 1$ of the residual, so we never solve
  for it numerically.

The roots of $Q$ come from `numpy.roots` and are polished by Newton's method in float64 on
$\|x(\mu)\|^2 - 1$ with $x(\mu)$ from forward substitution (well conditioned, unlike the
expanded coefficients); a root is kept only when the polished token satisfies its own
equation. The enumeration is complete up to the root finder: every real root of each $Q$ and
both chain signs are followed, and the census reports the number of near-real complex roots it
rejected (0 means nothing was borderline).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._errors import UsageError

__all__ = ["ExactCensus", "exact_equilibria", "bidiagonal_parameter"]

# A root of Q is "real" when its imaginary part is below this (relative); a real double root
# splits into a pair with imaginary parts ~ sqrt(eps) ~ 1e-8, so this admits it for polishing,
# after which the token equation decides.
_IMAG_TOL = 1e-6
# The polished token must satisfy its equation to this many units of its rounding level.
_TOKEN_TOL = 1e3


@dataclasses.dataclass(frozen=True)
class ExactCensus:
    """Every equilibrium of the paper's system (host-side NumPy arrays).

    Attributes:
        x: ``(m, n, d)`` all equilibria (float64) (not reduced modulo symmetry; the sign flip pairs them).
        steps: ``(m, n)`` per token ``"first"``, ``"chain"`` ($\\lambda = 1$) or ``"root"``.
        lam: ``(m, n)`` the normalisation $\\lambda_i = \\|\\sum_{j\\le i} X_j W\\|$ of each token.
        error_estimate: ``(m,)`` an estimate of $\\max|X - X^*|$ (see `exact_equilibria`).
        rejected_near_real: complex roots with a small imaginary part whose polishing did not
            give a real solution (0: nothing borderline).
    """

    x: np.ndarray
    steps: np.ndarray
    lam: np.ndarray
    error_estimate: np.ndarray
    rejected_near_real: int


def bidiagonal_parameter(w_v: np.ndarray, *, rtol: float = 1e-12) -> float | None:
    r"""$w$ if ``w_v`` is $c\,(I + wS)$ with $c > 0$ and $w \neq 0$ (LN removes $c$), else ``None``."""
    w_v = np.asarray(w_v, dtype=float)
    d = w_v.shape[0]
    if w_v.ndim != 2 or w_v.shape != (d, d) or d < 2 or not w_v[0, 0] > 0:
        return None
    c = w_v[0, 0]
    w = w_v[0, 1] / c
    target = c * (np.eye(d) + w * np.eye(d, k=1))
    if w == 0 or np.max(np.abs(w_v - target)) > rtol * np.max(np.abs(target)):
        return None
    return float(w)


def _x_of_mu(b: np.ndarray, mu, w):
    """$x$ solving $x(\\mu I - wS) = b$ by forward substitution, and $dx/d\\mu$."""
    x = np.empty_like(b)
    dx = np.empty_like(b)
    prev = prev_d = 0.0
    for m in range(b.shape[0]):
        x[m] = (b[m] + w * prev) / mu
        dx[m] = (w * prev_d - x[m]) / mu  # d/dmu of x_m mu = b_m + w x_{m-1}
        prev, prev_d = x[m], dx[m]
    return x, dx


def _polish(b: np.ndarray, mu, w, iters: int = 50):
    """Newton on $f(\\mu) = \\|x(\\mu)\\|^2 - 1$; returns the root and the last correction."""
    step = np.inf
    tiny = float(np.finfo(b.dtype).eps) / 10
    for _ in range(iters):
        x, dx = _x_of_mu(b, mu, w)
        f, fp = x @ x - 1.0, 2.0 * (x @ dx)
        if fp == 0 or not np.isfinite(fp):
            break
        new_step = f / fp
        mu -= new_step
        # Stop once the corrections stop shrinking (rounding level) or vanish.
        if abs(new_step) >= abs(step) and abs(new_step) < 1e3 * tiny * max(1.0, abs(mu)):
            step = new_step
            break
        step = new_step
        if abs(step) <= tiny * max(1.0, abs(mu)):
            break
    return mu, abs(step)


def _root_steps(b: np.ndarray, w):
    """All real solutions $(x, \\lambda, \\text{error})$ of the root step on the tail ``b``."""
    k = b.shape[0] - 1
    one = b.dtype.type(1)
    # v(nu) = sum_k nu^(K-k) (b S^k); component m has coefficient b_{m-k} at nu^(K-k).
    comps = np.zeros((k + 1, k + 1), b.dtype)  # comps[m, power]
    for m in range(k + 1):
        for j in range(m + 1):
            comps[m, k - j] += b[m - j]
    q = np.zeros(2 * k + 3, b.dtype)
    q[2 * k + 2] = 1.0
    for m in range(k + 1):
        q[: 2 * k + 1] -= np.convolve(comps[m], comps[m]) / w**2
    roots = np.roots(q[::-1].astype(float))
    out, rejected = [], 0
    for r in roots:
        if abs(r.imag) > _IMAG_TOL * max(1.0, abs(r)):
            continue
        mu, err = _polish(b, w * b.dtype.type(r.real), w)
        x, dx = _x_of_mu(b, mu, w)
        lam = one + mu
        ok = lam > 0 and abs(x @ x - one) <= 1e-13 and abs(r.imag) <= 1e-3 * max(1.0, abs(r))
        if not ok:
            rejected += abs(r.imag) > 0
            continue
        if any(abs(mu - m2) <= 1e-9 * max(1.0, abs(mu)) for _, m2, _ in out):
            continue  # a double root polished twice
        out.append((x, mu, float(err) * float(np.sqrt(dx @ dx))))
    return out, rejected


def exact_equilibria(n: int, d: int, w: float) -> ExactCensus:
    r"""Every equilibrium of the causal, uniform-attention, post-LN layer with $W_V = I + wS$.

    Token-by-token enumeration (module docstring): the first token is $\pm e_d$; token $i$ given
    $s = \sum_{j<i} X_j$ follows every chain step ($\lambda = 1$, when $s_1 = 0$) and every real
    root of $Q$ ($\lambda \ne 1$). Valid for any real $w \ne 0$.

    The error estimate is the distance to the same enumeration polished in extended precision
    (``numpy.longdouble``, 64-bit mantissa on x86) where that type is wider than float64, else
    a first-order propagation of the last Newton corrections (a conservative bound).

    Arguments:
        n: number of tokens (>= 1).
        d: token dimension (>= 2).
        w: the superdiagonal of $W_V$ (nonzero).

    Returns:
        An `ExactCensus` (float64 arrays).

    Raises:
        ValueError: for ``n < 1``, ``d < 2`` or ``w`` zero or not finite.
    """
    if not (isinstance(n, (int, np.integer)) and n >= 1):
        raise UsageError(f"n must be an integer >= 1, got {n!r}.")
    if not (isinstance(d, (int, np.integer)) and d >= 2):
        raise UsageError(f"d must be an integer >= 2, got {d!r}; for d = 1 every unit token is +-1.")
    w = float(w)
    if not np.isfinite(w) or w == 0:
        raise UsageError(
            f"w must be finite and nonzero, got {w}; at w = 0, W_V = I and every point is fixed."
        )
    census = _enumerate(n, d, w, np.float64)
    if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps and len(census.x):
        wide = _enumerate(n, d, w, np.longdouble, check=False)
        if wide.x.shape == census.x.shape:
            # Pair members by sorting both on rounded coordinates (root order may differ).
            def order(x):
                return np.lexsort(np.round(x.reshape(len(x), -1), 6).T[::-1])

            a, b = order(census.x), order(wide.x.astype(float))
            diff = np.empty(len(a))
            diff[a] = np.max(np.abs(census.x[a] - wide.x[b].astype(float)), axis=(1, 2))
            # A pair further apart than the rounding grid is a mismatch, not an error: keep the bound.
            est = np.where(diff < 1e-7, diff + 2 * np.finfo(float).eps, census.error_estimate)
            census = dataclasses.replace(census, error_estimate=est)
    return census


def _enumerate(n: int, d: int, w, dtype, check: bool = True) -> ExactCensus:
    """The tree enumeration in ``dtype`` (roots of Q in float64, polishing in ``dtype``)."""
    dtype = np.dtype(dtype)
    eps = float(np.finfo(dtype).eps)
    w = dtype.type(w)
    # A partial equilibrium: (tokens, lowest structurally nonzero coordinate a, steps, lams, error).
    first = []
    for sign in (1.0, -1.0):
        x = np.zeros(d, dtype)
        x[-1] = sign
        first.append(([x], d - 1, ["first"], [1.0], 0.0))
    level = first
    rejected = 0
    for _ in range(1, n):
        nxt = []
        for toks, a, steps, lams, err in level:
            s = np.sum(toks, axis=0)
            s[:a] = 0.0  # exact zeros (they are zero already; this documents the structure)
            sw = s.copy()
            sw[1:] += w * s[:-1]
            tail = sw[a:]
            # Error of s propagates through x(mu) = sW (mu I - wS)^-1: amplification ~ ||dx/ds||.
            found, rej = _root_steps(tail, w)
            rejected += rej
            for x_t, mu, e in found:
                x = np.zeros(d, dtype)
                x[a:] = x_t
                amp = 1.0 / max(float(np.sqrt(tail @ tail)), eps) * (1 + abs(float(w)))
                nxt.append((toks + [x], a, steps + ["root"], lams + [1.0 + mu], e + amp * (err + 10 * eps)))
            if a >= 1:  # chain step: needs s_1 = 0 (structurally: coordinates < a vanish)
                x = np.zeros(d, dtype)
                x[a - 1 : d - 1] = -tail / w
                r2 = 1.0 - float(x @ x)
                if r2 < -1e-14:
                    continue
                root = np.sqrt(max(r2, dtype.type(0)))
                for sign in (1.0, -1.0) if root > 0 else (1.0,):
                    y = x.copy()
                    y[-1] = sign * root
                    e = (
                        (err + 10 * eps)
                        * (1 + abs(float(w)))
                        / abs(float(w))
                        * (1 + 1 / max(float(root), eps**0.5))
                    )
                    nxt.append((toks + [y], a - 1, steps + ["chain"], lams + [1.0], e))
        level = nxt
    if not level:
        return ExactCensus(
            np.zeros((0, n, d)), np.zeros((0, n), str), np.zeros((0, n)), np.zeros(0), rejected
        )
    xs = np.stack([np.stack(t) for t, *_ in level])
    # Check every member against its token equations (a solution that fails is a bug, not noise).
    bad = _token_residuals(xs.astype(float), float(w)).max(axis=-1) > _TOKEN_TOL
    if check and bad.any():
        raise RuntimeError(
            f"exact_equilibria: {int(bad.sum())} members fail their token equation; please report."
        )
    return ExactCensus(
        x=xs.astype(float),
        steps=np.array([s for _, _, s, _, _ in level]),
        lam=np.array([l_ for _, _, _, l_, _ in level], dtype=float),
        error_estimate=np.array([e for *_, e in level]) + 10 * eps,
        rejected_near_real=int(rejected),
    )


def _token_residuals(xs: np.ndarray, w: float) -> np.ndarray:
    """$\\|\\mathrm{LN}(\\sum_{j\\le i} X_j W) - X_i\\|$ per member and token, in units of its rounding level.

    Evaluating the map at $y = \\sum_{j \\le i} X_j$ costs $\\varepsilon \\|y\\| \\|W\\| / \\|yW\\|$
    (cancellation when $\\lambda = \\|yW\\|$ is small), so the residual is divided by that.
    """
    d = xs.shape[-1]
    wv = np.eye(d) + w * np.eye(d, k=1)
    s = np.cumsum(xs, axis=1)
    y = s @ wv
    lam = np.linalg.norm(y, axis=-1)
    scale = np.finfo(float).eps * (1 + np.linalg.norm(s, axis=-1) * np.linalg.norm(wv)) / lam
    return np.linalg.norm(y / lam[..., None] - xs, axis=-1) / scale
