r"""Target ``equilibria-ranks``: equilibria of every rank (Theorem 3; App. F.1-F.2), and all the others.

Causal mask, uniform attention ($W_Q = W_K = 0$), post-LN and the full upper-bidiagonal
$W_V = I + w\sum_m e_m e_{m+1}^\top$. For $N = d$ and $w \ge N$ the construction of App. F.1
gives, for every $k = 1..N$, $2^k$ equilibria of rank $k$ (tokens $1..c$ at $\pm e_d$,
$c = N - k + 1$, then a Jordan chain). App. F.2 bounds the stable rank of the full-rank ones:

$$1 \le \mathrm{SRank}(X^*) \le \frac{N}{N - (N-1)/w^2}.$$

For each $(N, w)$ we build all of them with `rankdyn._constructions.all_closed_form_equilibria`
and measure the fixed-point residual under an independent NumPy map, the numerical rank, the
number of distinct ones per rank, the stable rank against the bound and the multipliers on
the tangent space of $(\mathbb S^{d-1})^N$ (`rankdyn.equilibria.stability`). The closed forms do
not vouch for themselves: the exact census (`rankdyn.equilibria._exact`, token-by-token
polynomial roots, an independent derivation) must contain every one of them, and it shows how
many equilibria of each rank exist beyond the $2^k$ family and their stability classes.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from . import _verdict as V

NAME = "equilibria-ranks"
CLAIM = (
    "Theorem 3 (item 1) and App. F.1-F.2: with the causal mask, uniform attention and the bidiagonal "
    "W_V = I + w S, post-LN dynamics have equilibria of every rank k = 1..N (2^k of each, all coexisting "
    "for N = d and w >= N); the full-rank ones are anisotropic, 1 <= SRank <= N / (N - (N-1)/w^2). "
    "The paper says they are 'stable in certain directions' with small regions of attraction."
)

#: The exact census runs for N <= this (its size grows fast: 68, 950, ~14 000 at N = 4, 6, 8).
CENSUS_MAX_N = 6

#: Our earlier finite-difference check (docs/theory.md#stability): largest multiplier modulus, N = d = 4.
EARLIER_STABILITY_N4 = {
    "w=4": {
        "k=1": "marginal (max |eig| = 1)",
        "k=2": "marginal",
        "k=3": "unstable (|eig| ~ 2.8-2.9)",
        "k=4": "unstable (|eig| ~ 1.7-2.9, saddles)",
    },
    "w=8": {"k=2": "unstable (|eig| 1.78)"},
}


def _sizes(quick: bool, tiny: bool) -> dict:
    if tiny:
        return dict(ns=(4,), w_factors=(1.0,))
    if quick:
        return dict(ns=(4, 6, 8), w_factors=(1.0,))
    return dict(ns=(4, 6, 8), w_factors=(1.0, 2.0))


def _distinct(xs: np.ndarray, atol: float = 1e-9) -> int:
    """Number of distinct matrices in ``xs`` (pairwise max-abs distance > atol)."""
    flat = xs.reshape(xs.shape[0], -1)
    dist = np.max(np.abs(flat[:, None] - flat[None]), axis=-1)
    # Greedy: count representatives (an equilibrium equal to an earlier one is a duplicate).
    dup = np.any(np.tril(dist <= atol, k=-1), axis=1)
    return int(np.sum(~dup))


def np_map(x: np.ndarray, w: float) -> np.ndarray:
    """The paper's map in NumPy: $F(X)_i = \\mathrm{LN}(\\sum_{j \\le i} X_j (I + wS))$ (eq. 3, uniform causal)."""
    d = x.shape[-1]
    y = np.cumsum(x, axis=-2) @ (np.eye(d) + w * np.eye(d, k=1))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def census_table(n: int, w: float) -> dict:
    """The exact census at ``(n, n, w)``: classes (modulo sign) per rank and stability class."""
    import jax.random as jr

    from .._constructions import all_closed_form_equilibria, uniform_causal_layer
    from .._weights import bidiagonal
    from ..equilibria import equilibrium_census

    layer = uniform_causal_layer(n, n, bidiagonal(n, w))
    c = equilibrium_census(
        layer, jr.PRNGKey(0), closed_forms=all_closed_form_equilibria(n, n, w), progress=False
    )
    xs = np.stack([e.tokens for e in c.equilibria])
    closed = np.stack([np.asarray(x) for _, x in all_closed_form_equilibria(n, n, w)])
    # Independent evidence: every census member is a fixed point of the NumPy map, and every
    # closed form (both signs) is a census member up to the sign flip.
    dist = np.minimum(
        np.abs(closed[:, None] - xs[None]).max(axis=(2, 3)),
        np.abs(closed[:, None] + xs[None]).max(axis=(2, 3)),
    )
    return {
        "method": c.method,
        "classes": len(xs),
        "members": c.completeness.get("members"),
        "by_rank": c.by_rank,
        "by_rank_and_class": c.by_rank_and_class,
        "closed_form_classes_by_rank": {k: v["found"] for k, v in c.closed_forms["by_rank"].items()},
        "max_numpy_residual": float(np.abs(np_map(xs, w) - xs).max()),
        "max_error_estimate": float(max(e.error_estimate for e in c.equilibria)),
        "closed_forms_in_census": bool(dist.min(axis=1).max() < 1e-12),
        "seconds": c.timing["search_s"] + c.timing["stability_s"],
    }


def analyse(n: int, d: int, w: float, *, rank_tol: float = 1e-13, stab_tol: float = 1e-6) -> dict:
    r"""All closed-form equilibria at ``(n, d, w)`` and their measured properties.

    The residuals are those of an independent NumPy map (`np_map`); the multipliers come from
    `rankdyn.equilibria.stability` on all points at once (one compiled, vmapped program).

    Returns:
        dict of per-equilibrium arrays: ``k``, ``residual``, ``rank``, ``stable_rank``,
        ``bound_projected`` ($N / \sum_i X_{i,d}^2$, our bound for every $k$ from
        $\|X\|_2^2 \ge \|X e_d\|^2$), ``spectral_radius``, ``classification``,
        ``unstable_dims``, ``contracting_dims``; plus ``bound_full_rank`` (App. F.2) and the
        per-rank ``count`` / ``distinct``.
    """
    from .._constructions import rank_k_equilibrium, uniform_causal_layer
    from .._weights import bidiagonal
    from ..equilibria import stability

    # Every sign choice (s_0, s_{c+1..n}) of every valid rank, without deduplication: that
    # the 2^k choices give 2^k distinct points is one of the things measured.
    eqs = [
        (k, np.asarray(rank_k_equilibrium(n, d, k, w, signs=bits)))
        for k in range(1, min(n, d) + 1)
        if k == 1 or w >= n - k + 1
        for bits in itertools.product((1.0, -1.0), repeat=k)
    ]
    ks = np.array([k for k, _ in eqs])
    xn = np.stack([x for _, x in eqs])
    layer = uniform_causal_layer(n, d, bidiagonal(d, w))
    # The residual under an independent NumPy map (eq. 3 with uniform causal attention), not
    # the library's layer: the closed forms must not vouch for themselves.
    res = np.linalg.norm((np_map(xn, w) - xn).reshape(len(xn), -1), axis=-1)
    s = np.linalg.svd(xn, compute_uv=False)
    # Relative tolerance 1e-13: the k-th singular value of a rank-k equilibrium is ~w^-(k-1)
    # relative to the first (1.8e-11 at N = 8, w = 16), the (k+1)-th is at rounding level (< 1e-16).
    rank = np.sum(s > rank_tol * s[:, :1], axis=-1)
    sk = s[np.arange(len(ks)), ks - 1] / s[:, 0]
    sk1 = np.where(ks < s.shape[1], s[np.arange(len(ks)), np.minimum(ks, s.shape[1] - 1)] / s[:, 0], 0.0)
    srank = np.sum(s**2, axis=-1) / s[:, 0] ** 2
    proj = n / np.sum(xn[:, :, -1] ** 2, axis=-1)
    # One compiled, vmapped stability program for all points (rankdyn.equilibria.stability).
    reps = stability(layer, jnp.asarray(xn), tol=stab_tol)
    rho = [r.spectral_radius for r in reps]
    cls = [r.classification for r in reps]
    unstable = [r.unstable_dims for r in reps]
    # Neutral/contracting multipliers are counted with a looser 1e-2: the multiplier 1 is
    # defective (a Jordan block of size up to d - 1) and rounding spreads it by ~eps^(1/(d-1)).
    neutral = [int(np.sum(np.abs(r.moduli - 1) <= 1e-2)) for r in reps]
    contracting = [int(np.sum(r.moduli < 1 - 1e-2)) for r in reps]
    per_k = {}
    for k in range(1, n + 1):
        sel = ks == k
        per_k[k] = {
            "count": int(sel.sum()),
            "distinct": _distinct(xn[sel]) if sel.any() else 0,
            "expected": 2**k,
        }
    return {
        "n": n,
        "d": d,
        "w": float(w),
        "k": ks,
        "residual": res,
        "rank": rank,
        "sigma_k_rel": sk,
        "sigma_k1_rel": sk1,
        "stable_rank": srank,
        "bound_projected": proj,
        "bound_full_rank": n / (n - (n - 1) / w**2),
        "spectral_radius": np.array(rho),
        "classification": np.array(cls),
        "unstable_dims": np.array(unstable),
        "neutral_dims": np.array(neutral),
        "contracting_dims": np.array(contracting),
        "per_k": per_k,
        "states": xn,
    }


def run(out: Path, *, quick: bool, seed: int, tiny: bool = False) -> dict:
    """Run the target; write ``equilibria_ranks.png`` into ``out``; return the result dict.

    ``seed`` is recorded but unused: every equilibrium is in closed form.
    """
    from .. import plotting
    from .._progress import plan_steps, step_done

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sz = _sizes(quick, tiny)
    results = []
    measured: dict = {}
    ok_res = ok_rank = ok_count = ok_bound = ok_census = True
    census_rows = [
        "",
        "Exact census (classes modulo the sign flip; closed forms among them; stability):",
        "",
        "| N = d | w | rank | classes | closed-form classes (2^k / 2) | stable | marginal | unstable |",
        "|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        "| N = d | w | k | count (2^k) | max residual | ranks | SRank range | bound | max |eig| range | "
        "classification | min # contracting dirs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    plan_steps(len(sz["ns"]) * len(sz["w_factors"]))  # progress: one step per (N, w) analysis
    with jax.enable_x64(True):
        for n in sz["ns"]:
            for fac in sz["w_factors"]:
                w = float(n) * fac
                r = analyse(n, n, w)
                step_done(f"N=d={n} w={w:g}")
                results.append(r)
                key = f"N=d={n}, w={w:g}"
                entry = {}
                for k in range(1, n + 1):
                    sel = r["k"] == k
                    pk = r["per_k"][k]
                    cls, cnt = np.unique(r["classification"][sel], return_counts=True)
                    entry[f"k={k}"] = {
                        "count": pk["count"],
                        "distinct": pk["distinct"],
                        "expected_2^k": pk["expected"],
                        "max_residual": float(r["residual"][sel].max()),
                        "ranks": sorted(set(int(v) for v in r["rank"][sel])),
                        "min_sigma_k_over_sigma_1": float(r["sigma_k_rel"][sel].min()),
                        "max_sigma_k+1_over_sigma_1": float(r["sigma_k1_rel"][sel].max()),
                        "stable_rank_min_max": [
                            float(r["stable_rank"][sel].min()),
                            float(r["stable_rank"][sel].max()),
                        ],
                        "projected_bound_ok": bool(
                            np.all(r["stable_rank"][sel] <= r["bound_projected"][sel] + 1e-12)
                        ),
                        "spectral_radius_min_max": [
                            float(r["spectral_radius"][sel].min()),
                            float(r["spectral_radius"][sel].max()),
                        ],
                        "classification": {str(c): int(m) for c, m in zip(cls, cnt)},
                        "min_contracting_dims": int(r["contracting_dims"][sel].min()),
                    }
                    ok_res &= bool(r["residual"][sel].max() < 1e-12)
                    ok_rank &= bool(np.all(r["rank"][sel] == k))
                    ok_count &= pk["distinct"] == pk["expected"] == pk["count"]
                    e = entry[f"k={k}"]
                    rows.append(
                        f"| {n} | {w:g} | {k} | {e['distinct']} ({e['expected_2^k']}) | {e['max_residual']:.1e} | "
                        f"{e['ranks']} | {e['stable_rank_min_max'][0]:.4f}-{e['stable_rank_min_max'][1]:.4f} | "
                        f"{r['bound_full_rank']:.4f}{'' if k == n else ' (full rank only)'} | "
                        f"{e['spectral_radius_min_max'][0]:.3f}-{e['spectral_radius_min_max'][1]:.3f} | "
                        f"{', '.join(f'{c}: {m}' for c, m in e['classification'].items())} | {e['min_contracting_dims']} |"
                    )
                full = r["k"] == n
                bound_ok = bool(np.all(r["stable_rank"][full] <= r["bound_full_rank"] + 1e-12))
                ok_bound &= bound_ok
                entry["full_rank_stable_rank_max"] = float(r["stable_rank"][full].max())
                entry["full_rank_bound"] = r["bound_full_rank"]
                entry["full_rank_bound_holds"] = bound_ok
                entry["full_rank_all_unstable"] = bool(np.all(r["classification"][full] == "unstable"))
                # The exact census (an independent derivation: token-by-token polynomial roots)
                # must contain every closed form and shows how many equilibria lie beyond them.
                # Up to N = 6 (950 equilibria at w = 7; N = 8 has ~14 000, minutes of stability work).
                if n <= CENSUS_MAX_N:
                    cen = census_table(n, w)
                    entry["census"] = cen
                    ok_census &= cen["closed_forms_in_census"] and cen["max_numpy_residual"] < 1e-12
                    ok_census &= all(
                        cen["closed_form_classes_by_rank"][str(k)] == 2 ** (k - 1) for k in range(1, n + 1)
                    )
                    for k in range(1, n + 1):
                        c = cen["by_rank_and_class"][str(k)]
                        census_rows.append(
                            f"| {n} | {w:g} | {k} | {cen['by_rank'][str(k)]} | "
                            f"{cen['closed_form_classes_by_rank'][str(k)]} | {c['stable']} | "
                            f"{c['marginal']} | {c['unstable']} |"
                        )
                measured[key] = entry
        # Worked example (docs/theory.md#constructions) (N = d = 5, w = 2, all s_i = -1): SRank 1.2042 vs bound 1.25.
        from .._constructions import rank_k_equilibrium

        x5 = np.asarray(rank_k_equilibrium(5, 5, 5, 2.0))
        s5 = np.linalg.svd(x5, compute_uv=False)
        measured["spec_worked_example_N5_w2"] = {
            "stable_rank": float(np.sum(s5**2) / s5[0] ** 2),
            "spec_stable_rank": 1.2042,
            "bound": 5 / (5 - 4 / 4.0),
        }

    plotting.plot_equilibria_ranks(results, path=out / "equilibria_ranks.png")
    checks = {
        "residual < 1e-12 (NumPy map)": ok_res,
        "rank == k": ok_rank,
        "2^k distinct per rank": ok_count,
        "full-rank SRank <= bound": ok_bound,
        "exact census contains the 2^k closed forms of each rank": ok_census,
    }
    measured["checks"] = checks
    # The same five checks, counted in the report's summary table (each can fail: independent
    # NumPy map, SVD ranks, distinct counts, closed-form bound, an exact census found separately).
    check_list = [V.check(name, ok) for name, ok in checks.items()]
    n_ok = sum(checks.values())
    verdict = "reproduced" if n_ok == len(checks) else ("partially" if n_ok else "not reproduced")

    n4 = next((r for r in results if r["n"] == 4 and r["w"] == 4.0), None)
    stab_note = ""
    if n4 is not None:
        rad = {k: float(n4["spectral_radius"][n4["k"] == k].max()) for k in range(1, 5)}
        stab_note = (
            "Stability [ours, docs/theory.md#stability]: at N = d = 4, w = 4 the largest multiplier modulus per rank is "
            + ", ".join(f"k={k}: {v:.3f}" for k, v in rad.items())
            + " (earlier check: rank 1 marginal, rank 2 marginal at w=4, rank 3 ~2.8-2.9, full rank 1.7-2.9). "
        )
    n_total = sum(len(r["k"]) for r in results)
    n_contract = sum(int(np.sum(r["contracting_dims"] > 0)) for r in results)
    smin = min(float(r["sigma_k_rel"][r["k"] == r["n"]].min()) for r in results)
    n_fuzzy = sum(
        int(np.sum((r["classification"] == "unstable") & (r["spectral_radius"] < 1.01))) for r in results
    )
    n_neutral = sum(int(np.sum(r["neutral_dims"] > 0)) for r in results)
    no_contract = sorted(
        {
            f"N={r['n']} w={r['w']:g} k={int(k)}"
            for r in results
            for k, c in zip(r["k"], r["contracting_dims"])
            if c == 0
        }
    )
    rank2_note = ""
    if n4 is not None:
        cls2 = n4["classification"][n4["k"] == 2]
        rank2_note = (
            f"Our earlier check called rank 2 at N = d = 4, w = 4 marginal; here {int(np.sum(cls2 == 'marginal'))} of "
            f"{cls2.size} sign choices are marginal and {int(np.sum(cls2 == 'unstable'))} unstable "
            f"(max |multiplier| {float(n4['spectral_radius'][n4['k'] == 2].max()):.3f}): the classification depends "
            "on the signs; that check presumably tested one choice. "
        )
    full_unstable = all(measured[k]["full_rank_all_unstable"] for k in measured if k.startswith("N=d"))
    notes = (
        stab_note
        + (
            "Every full-rank equilibrium has a multiplier of modulus > 1, i.e. they are saddles, as our earlier check found for "
            "N = d >= 3. "
            if full_unstable
            else "Not every full-rank equilibrium is unstable here (the earlier check found saddles). "
        )
        + f"{n_neutral} of {n_total} equilibria have a multiplier of modulus 1 within 1e-2 (non-hyperbolic "
        "first token(s) at +-e_d: algebraic convergence; the multiplier 1 is defective, so rounding spreads it by "
        f"~eps^(1/(d-1)), up to ~6e-3 at d = 8); {n_fuzzy} classified 'unstable' have a spectral radius below "
        "1.01, i.e. within that numerical fuzz; "
        f"{n_contract} of {n_total} have at least one contracting direction "
        "(|multiplier| < 0.99), our reading of the paper's unquantified 'stable in certain directions'"
        + (f" (those without one: {', '.join(no_contract)})" if no_contract else "")
        + ". "
        + rank2_note
        + "The stability columns are our analysis, not a paper claim, and do not enter the verdict. "
        + f"The smallest sigma_N/sigma_1 of a full-rank equilibrium is {smin:.2g} (it scales like w^-(N-1)); the "
        "rank is measured in float64 with a relative tolerance of 1e-13 (the next singular value is at rounding "
        "level)"
        + ("; in float32 (eps ~ 1.2e-7) some would read as lower rank. " if smin < 1.2e-7 else ". ")
        + "The paper states the count 2^k and the stable-rank bound for the full-rank family; for k < N "
        "we check the analogous bound N / sum_i X_{i,d}^2 (from ||X||_2 >= ||X e_d||), which is ours. "
        "Theorem 3's item 1 was lost in the text extraction (docs/theory.md#ambiguities-and-choices); we test the reconstruction "
        "'rank-k equilibria for every k, 2^k each, N = d, w >= N'."
    )
    return {
        "name": NAME,
        "claim": CLAIM,
        "setting": {
            "ns (N = d)": list(sz["ns"]),
            "w": [float(n) * f for n in sz["ns"] for f in sz["w_factors"]],
            "mask": "causal",
            "attention": "uniform (W_Q = W_K = 0)",
            "W_V": "I + w S (full bidiagonal)",
            "norm": "sphere, post-LN",
            "dtype": "float64",
            "rank_tol (relative)": 1e-13,
            "stability_tol": 1e-6,
            "stability_space": "tangent space of the sphere product",
            "seed": seed,
            "seed_used": False,
            "quick": quick,
        },
        "measured": measured,
        "verdict": verdict,
        "criterion": (
            "reproduced iff, for every (N, w) and every k = 1..N: exactly 2^k distinct closed-form equilibria, "
            "each with fixed-point residual ||F(X) - X||_F < 1e-12 under an independent NumPy map and numerical "
            "rank k (singular values > 1e-13 sigma_max), every full-rank one has SRank <= N/(N-(N-1)/w^2), and "
            "the exact census (independent of the closed forms; N <= 6) contains all 2^k of each rank; 'partially' if "
            "some of these five checks fail. Stability and the counts beyond 2^k are reported, not judged."
        ),
        "checks": V.checks_json(check_list),
        "figures": ["equilibria_ranks.png"],
        "notes": notes,
        "markdown": "\n".join(rows + census_rows),
    }
