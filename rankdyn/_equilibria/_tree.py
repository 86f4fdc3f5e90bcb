r"""Token-by-token equilibrium search for acyclic masks (causal, uni-directional windows).

If the mask graph is acyclic apart from self-loops (lower triangular in token order), token
$i$'s fixed-point equation $F_i(X) = X_i$ (eq. 3) involves only tokens $j \le i$, so the
equilibria form a tree: solve token 1, then for each solution token 2 given token 1, and so on
(`docs/theory.md#masks-as-graphs`). Each step is a $d$-dimensional problem on the sphere.

* **First token.** When it attends only to itself and the layer is the plain eq. 3 (one head,
  no skip, no MLP, no $W_O$), $F_1(x) = \mathrm{LN}(x W_V)$, so the solutions are exactly the
  unit left eigenvectors of $W_V$ with a real positive eigenvalue: computed as a null space
  (SVD), never by Newton (for $W_V = I + wS$ it is a root of multiplicity $d-1$, where a
  rounding-level residual leaves $\sim10^{-3}$ errors).
* **Later tokens.** Batched multi-start Gauss--Newton per partial equilibrium, in rounds; each
  round deflates the solutions found so far (Farrell et al. 2015), and the saturation
  statistics (new solutions per round) say when the search stopped growing.

`polish_tokens` re-solves any equilibrium of an acyclic mask token by token in the same way
(first token exactly, later tokens by Newton given the earlier ones) and returns a per-member
error estimate: the norm of the last pseudo-inverse Newton correction of each token.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import lineax as lx
import numpy as np
import optimistix as optx
from jaxtyping import ArrayLike, Float

from .._errors import UsageError
from .._model._layer import SelfAttentionLayer
from .._model._norms import SphereNorm
from .._observe._tolerances import default_residual_tol
from .._run._interrupt import check_interrupt
from ._deflation import _log_deflation
from ._results import TreeResult

__all__ = ["is_acyclic", "first_token_solutions", "tree_search", "polish_tokens"]


def is_acyclic(layer: SelfAttentionLayer) -> bool:
    """Whether token ``i`` attends only to tokens ``j <= i`` (a lower-triangular mask)."""
    mask = np.asarray(layer.mask)
    return not np.triu(mask, k=1).any()


def _plain_first_token(layer: SelfAttentionLayer) -> bool:
    mask = np.asarray(layer.mask)
    w = layer.weights
    return (
        layer.placement == "post"
        and mask[0].sum() == 1
        and layer.num_heads == 1
        and not layer.skip
        and w.mlp is None
        and w.w_o is None
        and layer.fixed_attention is None
        and layer.num_layers is None
        and isinstance(layer.norm, SphereNorm)
        and float(layer.norm.radius) == 1.0
    )


def _value_matrix(layer: SelfAttentionLayer) -> np.ndarray:
    """The single head's ``(d, d)`` value matrix (weights carry a heads axis)."""
    return np.asarray(layer.weights.w_v).reshape(layer.dim, -1)


def first_token_solutions(w_v: np.ndarray, *, tol: float = 1e-9) -> np.ndarray | None:
    r"""All unit $x$ with $x W_V = \lambda x$, $\lambda > 0$: $\pm$ the real left eigenvectors.

    Eigenvalues closer than ``tol`` are averaged first (a defective eigenvalue of multiplicity
    $m$ is computed with error $\varepsilon^{1/m}$, its cluster mean to $O(\varepsilon)$); the
    eigenvectors are the null space of $(W_V - \lambda I)^\top$ by SVD.

    Returns:
        ``(k, d)`` solutions, or ``None`` when an eigenspace has dimension > 1 (then the first
        token's equilibria form a continuum, e.g. $W_V = I$).
    """
    w_v = np.asarray(w_v, dtype=float)
    d = w_v.shape[0]
    eig = np.linalg.eigvals(w_v)
    real = np.sort(eig[np.abs(eig.imag) <= tol * max(1.0, np.max(np.abs(eig)))].real)
    lams: list[list[float]] = []
    for v in real:
        if lams and abs(v - np.mean(lams[-1])) <= max(tol, 1e-6) * max(1.0, abs(v)):
            lams[-1].append(v)
        else:
            lams.append([v])
    out = []
    for group in lams:
        lam = float(np.mean(group))
        if lam <= 0:
            continue
        _, s, vt = np.linalg.svd((w_v - lam * np.eye(d)).T)
        null = vt[s <= 1e3 * np.finfo(float).eps * max(1.0, s[0])]
        if null.shape[0] != 1:
            return None
        v = null[0] / np.linalg.norm(null[0])
        out += [v, -v]
    return np.array(out).reshape(-1, d)


def _token_residual(layer, x, i, y, t):
    """$F_i(X') - y$ with $X'$ = ``x`` whose rows $\\ge i$ are ``y`` (later rows are masked out)."""
    rows = jnp.arange(x.shape[0])[:, None]
    xp = jnp.where(rows >= i, y[None, :], x)
    return layer(xp, t)[0][i] - y


def _solve_tokens(layer, xs, i, y0s, known, free, t, max_steps, power):
    """Solve token ``i`` of every prefix in ``xs`` from ``y0s`` with deflation of ``known``.

    Coordinates where ``free`` is 0 are held at exactly 0 (the solve runs in the subspace).
    """
    solver = optx.GaussNewton(rtol=1e-13, atol=1e-13, linear_solver=lx.SVD())

    def one(x, y0, kn, fr):
        def fn(y, args):
            y = y * fr
            y = y / jnp.linalg.norm(y)
            return _token_residual(layer, x, i, y, t) * jnp.exp(
                _log_deflation(y[None], kn[:, None], power, 1.0)
            )

        sol = optx.least_squares(fn, solver, y0 / jnp.linalg.norm(y0), max_steps=max_steps, throw=False)
        y = sol.value * fr
        y = y / jnp.linalg.norm(y)
        ok = jnp.all(jnp.isfinite(y))
        y = jnp.where(ok, y, y0)
        return y, jnp.where(ok, jnp.linalg.norm(_token_residual(layer, x, i, y, t)), jnp.inf)

    return jax.vmap(one)(xs, y0s, known, free)


_solve_tokens_jit = eqx.filter_jit(_solve_tokens)


def _newton_correction(layer, x, i, t):
    """Token ``i``'s pseudo-inverse Newton correction, residual and Jacobian singular values."""
    y = x[i]
    r = _token_residual(layer, x, i, y, t)
    jac = jax.jacfwd(lambda z: _token_residual(layer, x, i, z / jnp.linalg.norm(z), t))(y)
    s = jnp.linalg.svd(jac, compute_uv=False)
    # The radial direction is always in the kernel (the residual is scale-invariant in z): the
    # conditioning of the token is that of the other d - 1 singular values.
    # The cut-off follows the dtype: in float32 that kernel direction is rounding noise ~1e-7.
    rtol = max(1e-10, 1e3 * float(jnp.finfo(y.dtype).eps))
    return jnp.linalg.norm(jnp.linalg.pinv(jac, rtol=rtol) @ r), jnp.linalg.norm(r), s[0], s[-2]


@eqx.filter_jit
def _corrections(layer, xs, t):
    n = xs.shape[1]
    with jax.default_matmul_precision("highest"):
        return jax.vmap(lambda x: jax.vmap(lambda i: _newton_correction(layer, x, i, t))(jnp.arange(n)))(xs)


def _chunked(layer, xs, i, y0s, known, t, max_steps, power, chunk, free=None):
    """`_solve_tokens` over fixed-size chunks (padded), so every chunk reuses one program."""
    m = xs.shape[0]
    free = np.ones_like(y0s) if free is None else free
    # Power-of-two batch sizes: a handful of compiled programs serve every level of the tree.
    chunk = min(chunk, 1 << int(np.ceil(np.log2(max(m, 1)))))
    ys, rs = [], []
    for c0 in range(0, m, chunk):
        check_interrupt()  # Ctrl-C / SIGTERM on the command line: stop between chunks
        sl = slice(c0, min(c0 + chunk, m))
        pad = chunk - (sl.stop - sl.start)
        args = [
            np.concatenate([a[sl], np.repeat(a[sl][:1], pad, 0)]) if pad else a[sl]
            for a in (xs, y0s, known, free)
        ]
        xa, ya, ka, fa = map(jnp.asarray, args)
        y, r = _solve_tokens_jit(layer, xa, jnp.asarray(i), ya, ka, fa, t, max_steps, power)
        ys.append(np.asarray(y)[: sl.stop - sl.start])
        rs.append(np.asarray(r)[: sl.stop - sl.start])
    return np.concatenate(ys), np.concatenate(rs)


def tree_search(
    layer: SelfAttentionLayer,
    key,
    *,
    starts: int = 64,
    max_rounds: int = 6,
    min_rounds: int = 2,
    max_steps: int = 60,
    residual_tol: float | None = None,
    dedup_tol: float | None = None,
    chunk: int = 4096,
    max_members: int = 100_000,
    power: float | None = None,
    t=0,
    before_token=None,
) -> TreeResult:
    r"""All equilibria of a layer with an acyclic mask, token by token (module docstring).

    Arguments:
        layer: a `SelfAttentionLayer` whose mask is lower triangular.
        key: PRNG key of the random starts.
        starts: random sphere starts per partial equilibrium and round.
        max_rounds, min_rounds: rounds per token; after ``min_rounds`` the search of a token
            stops at the first round that finds nothing new (saturation).
        max_steps: Gauss--Newton steps per start.
        residual_tol: a token is a solution when $\|F_i - x_i\| \le$ this (default
            `rankdyn._observe._tolerances.default_residual_tol` of the layer's dtype: 1e-10 / 1e-5).
        dedup_tol: max-abs distance under which two solutions of one token are one (default
            $0.1\sqrt{\text{residual\_tol}}$: 1e-6 in float64, 3.2e-4 in float32; a solution with
            residual $r$ lies within $\sim r$ of a simple root and $\sim\sqrt r$ of a double one,
            and copies left apart here are merged by the census after polishing).
        chunk: starts per compiled batch.
        max_members: refuse to continue past this many partial equilibria.
        t: layer index.
        before_token: called as ``before_token(i, partials)`` before token ``i`` is solved
            (`rankdyn._equilibria._census_cost.tree_budget`: an estimate, and a refusal).

    Returns:
        A `TreeResult`: ``x`` ``(m, n, d)``, ``saturation`` (per token: partials, and per round
        the starts and new solutions) and ``first_token`` (``"exact"`` or ``"search"``).

    Raises:
        ValueError: if the mask is not acyclic or the tree grows past ``max_members``.
    """
    if not is_acyclic(layer):
        raise UsageError("tree_search needs a lower-triangular (acyclic) mask; use the joint search instead.")
    n, d = layer.num_tokens, layer.dim
    dt = np.asarray(layer.weights.w_v).dtype
    # Tolerances follow the dtype: a float32 token is accurate to ~1e-7, never to 1e-10.
    residual_tol = default_residual_tol(dt) if residual_tol is None else float(residual_tol)
    dedup_tol = 0.1 * np.sqrt(residual_tol) if dedup_tol is None else float(dedup_tol)
    power = float(d + 1 if power is None else power)
    first = first_token_solutions(_value_matrix(layer)) if _plain_first_token(layer) else None
    prefixes = np.zeros((1, n, d), dt)
    stats = []
    for i in range(n):
        if before_token is not None:
            before_token(i, prefixes.shape[0])
        if i == 0 and first is not None:
            prefixes = np.repeat(prefixes, len(first), axis=0)
            prefixes[:, 0] = first
            stats.append(
                {
                    "token": 1,
                    "partials": 1,
                    "method": "exact (null space of W_V - lambda I)",
                    "rounds": [],
                    "solutions": len(first),
                }
            )
            continue
        p = prefixes.shape[0]
        if p == 0:  # no prefix solves its tokens (e.g. a W_V with no real eigenvalue): no equilibria
            break
        found: list[list[np.ndarray]] = [[] for _ in range(p)]
        rounds = []
        for r in range(max_rounds):
            k = jr.fold_in(jr.fold_in(key, i), r)
            y0 = np.asarray(jr.normal(k, (p, starts, d), dtype=dt))
            kmax = max(1, max(len(f) for f in found))
            kpad = 1 << int(np.ceil(np.log2(kmax)))
            # Known solutions padded with a far point (its deflation factor is 1 to rounding).
            known = np.full((p, kpad, d), 1e3, dt)
            # Alternate plain rounds (fresh starts) with deflated ones: deflation finds solutions
            # with small basins, fresh starts those that a strong deflation factor hides.
            for j, f in enumerate(found):
                if f and r % 2 == 1:
                    known[j, : len(f)] = np.stack(f)
            rep = np.repeat(np.arange(p), starts)
            ys, res = _chunked(
                layer, prefixes[rep], i, y0.reshape(-1, d), known[rep], t, max_steps, power, chunk
            )
            new = 0
            for j, y, rr in zip(rep, ys, res):
                if rr <= residual_tol and not any(np.max(np.abs(y - z)) <= dedup_tol for z in found[j]):
                    found[j].append(y)
                    new += 1
            rounds.append(
                {
                    "starts": int(p * starts),
                    "new_solutions": new,
                    "converged": int(np.sum(res <= residual_tol)),
                }
            )
            if r + 1 >= min_rounds and new == 0:
                break
        total = sum(len(f) for f in found)
        if total > max_members:
            raise UsageError(
                f"tree_search: {total} partial equilibria at token {i + 1} exceed max_members="
                f"{max_members}; raise it or use the joint search."
            )
        stats.append(
            {
                "token": i + 1,
                "partials": p,
                "method": "multi-start Gauss-Newton + deflation",
                "rounds": rounds,
                "solutions": total,
                "saturated": bool(rounds[-1]["new_solutions"] == 0),
            }
        )
        nxt = [np.concatenate([prefixes[j][None]] * len(f)) for j, f in enumerate(found) if f]
        if not nxt:
            prefixes = np.zeros((0, n, d), dt)
            break
        sols = np.concatenate([np.stack(f) for f in found if f])
        prefixes = np.concatenate(nxt)
        prefixes[:, i] = sols
    return TreeResult(x=prefixes, saturation=stats, first_token="exact" if first is not None else "search")


@eqx.filter_jit
def _apply_many(layer, xs, t):
    """$F(X)$ for each ``X`` of ``xs``: one compiled program (called eagerly, a few dozen)."""
    return jax.vmap(lambda x: layer(x, t)[0])(xs)


def polish_tokens(
    layer: SelfAttentionLayer,
    xs: Float[ArrayLike, "m n d"],
    *,
    max_steps: int = 30,
    snap_tol: float = 1e-6,
    t=0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Re-solve equilibria of an acyclic mask token by token; return ``(x, residual, error_estimate)``.

    The first token is replaced by the nearest exact solution (`first_token_solutions`) when the
    layer allows it; each later token is polished by Gauss--Newton given the earlier ones, and
    coordinates below ``snap_tol`` are tried at exactly 0 (kept if the residual is no worse).
    Tokens are solved in the layer's dtype, and a token that would move by more than 0.1 keeps
    its value (polishing refines, it does not jump to another equilibrium).
    The error estimate is the largest per-token pseudo-inverse Newton correction (0 for an
    exact first token), or $\sqrt{\|r_i\| / \|J_i\|}$ where a token's Jacobian is singular
    (a conservative bound for a double root), plus rounding.
    """
    if not is_acyclic(layer):
        raise UsageError("polish_tokens needs a lower-triangular (acyclic) mask.")
    xs = np.array(xs, dtype=float, copy=True)
    m, n, d = xs.shape
    if m == 0:
        return xs, np.zeros(0), np.zeros(0)
    first = first_token_solutions(_value_matrix(layer)) if _plain_first_token(layer) else None
    exact_first = first is not None and len(first) > 0
    if exact_first:
        dist = np.max(np.abs(xs[:, None, 0] - first[None]), axis=-1)
        xs[:, 0] = first[np.argmin(dist, axis=1)]
    # Solve in the layer's dtype: float64 points through a float32 layer give a Jacobian whose
    # radial null direction is float32 noise (~1e-8, above a float64 SVD cut-off), and Newton
    # steps of O(1) that jumped to another equilibrium (measured: the 2-D example, w = 1.01).
    dt = np.asarray(layer.weights.w_v).dtype
    far = np.full((m, 1, d), 1e3, dt)
    chunk = max(1, 1 << int(np.ceil(np.log2(m))))
    for i in range(1 if exact_first else 0, n):
        y, r = _chunked(layer, xs.astype(dt), i, xs[:, i].astype(dt), far, t, max_steps, float(d + 1), chunk)
        # Degenerate tokens (a multiplier 1 in their own block, e.g. chain steps) keep ~1e-8
        # garbage in coordinates whose exact value is 0: Newton cannot see them to first
        # order. Snap tiny coordinates to 0, re-polish, and keep the snapped token when it is
        # at least as good.
        free = (np.abs(y) >= snap_tol).astype(dt)
        y2, r2 = _chunked(layer, xs.astype(dt), i, y * free, far, t, max_steps, float(d + 1), chunk, free)
        better = (r2 <= np.maximum(r, 4 * np.finfo(float).eps))[:, None]
        y = np.where(better, y2, y)
        # Polishing refines, it does not search: a token that moved by more than 0.1 went to
        # another equilibrium (float32 Newton near a bifurcation moved tokens by ~1); it keeps its
        # found value. Joint-search points are off by at most ~1e-2 (degenerate tokens).
        stay = (np.max(np.abs(y - xs[:, i]), axis=-1) > 0.1)[:, None]
        xs[:, i] = np.where(stay, xs[:, i], y)
    corr, res_tok, smax, smin = (
        np.array(a, dtype=float) for a in _corrections(layer, jnp.asarray(xs, dt), t)
    )
    # At a degenerate token (smallest relevant singular value ~ 0) the Newton correction says
    # nothing; a root of multiplicity >= 2 is pinned only to ~ sqrt(residual / ||J||).
    degenerate = smin <= max(1e-6, 1e3 * float(np.finfo(dt).eps)) * smax
    corr = np.where(degenerate, np.maximum(corr, np.sqrt(res_tok / np.maximum(smax, 1e-300))), corr)
    if exact_first:
        corr[:, 0] = 0.0
    fx = np.asarray(_apply_many(layer, jnp.asarray(xs, dt), t))
    res = np.linalg.norm((fx - xs).reshape(m, -1), axis=-1)
    return xs, res, corr.max(axis=1) + 2 * np.finfo(float).eps
