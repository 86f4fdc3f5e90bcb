"""The ``undirected`` target's work: the settings grid, the batched searches, censuses and certificates."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

#: Attention families: uniform ($W_Q = W_K = 0$), symmetric logits ($W_Q = W_K$, so
#: $W_Q W_K^\top$ is symmetric) and generic (independent BERT-uniform $W_Q, W_K$).
ATTENTION = ("uniform", "symmetric", "generic")
#: A final token matrix keeps rank >= 2 when sigma_2 > 1e-3 sigma_1 (the search's own threshold).
#: "Sustained" means at least this fraction of held-out inputs keeps it at depth T AND at the
#: longer evaluation depth (an input that collapses slowly loses it between the two).
SUSTAINED_FRACTION = 0.01


def masks_for(n: int) -> dict:
    """Mask name -> (make_mask name, window) for size n: the causal control first; window +-2
    only where it differs from the complete mask (n >= 4)."""
    out = {"causal": ("causal", 1), "complete": ("complete", 1), "window": ("window", 1)}
    if n >= 4:
        out["window2"] = ("window", 2)
    return out


def query_key(key, att: str, d: int, dtype):
    """``(W_Q, W_K)`` of an attention family (`ATTENTION`), square ``(d, d)``."""
    from ..._model._weights import bert_uniform

    kq, kk = jr.split(key)
    if att == "uniform":
        z = jnp.zeros((d, d), dtype)
        return z, z
    if att == "symmetric":
        w = bert_uniform(kq, (d, d), dtype)
        return w, w
    return bert_uniform(kq, (d, d), dtype), bert_uniform(kk, (d, d), dtype)


def settings_for(n: int, key, masks=None, atts=ATTENTION, pairs=None) -> list[tuple[str, str, object]]:
    """``[(mask, attention, layer)]`` for size n = d; one W_Q, W_K draw per family (from ``key``),
    shared by the masks, so that settings differ by one factor at a time. ``pairs`` (a list of
    ``(mask, attention)``) keeps only those settings; each one's layer is the same as in the
    full grid (the draws depend on the family only)."""
    from ..._model._layer import SelfAttentionLayer
    from ..._model._masks import make_mask

    dt = jnp.float64
    out = []
    for m, (name, win) in masks_for(n).items():
        if masks is not None and m not in masks:
            continue
        for att in atts:
            if pairs is not None and (m, att) not in pairs:
                continue
            w_q, w_k = query_key(jr.fold_in(key, ATTENTION.index(att)), att, n, dt)
            out.append(
                (m, att, SelfAttentionLayer(make_mask(name, n, window=win), w_q, w_k, jnp.eye(n, dtype=dt)))
            )
    return out


def summary(r) -> dict:
    """The numbers of one `SearchResult` that the report uses."""
    return {
        "mean_phi_T": r.after,
        "mean_phi_long": r.after_long,
        "frac_rank_ge2": list(r.frac_rank_ge2_after),
        "frac_rank_full": list(r.frac_rank_full_after),
        "sustained_rank_ge2": bool(min(r.frac_rank_ge2_after) >= SUSTAINED_FRACTION),
        "sustained_full_rank": bool(min(r.frac_rank_full_after) >= SUSTAINED_FRACTION),
        "selected": r.selected,
        "restart_scores": r.restart_scores,
        "w_v": r.w_v,
        "w_v_eigenvalues": r.w_v_eigenvalues,
        "w_q": r.w_q,
        "w_k": r.w_k,
    }


def run_searches(key, settings, sz: dict, objective: str, *, restarts=None, steps=None, train_depth=None):
    """One `search_value_matrices` call (one compiled program) for all settings of one size."""
    from ..._theory._counterexample_search import search_value_matrices

    opts = {k: sz[k] for k in ("num_layers", "eval_factor", "batch", "lr", "select_every", "eval_batch")}
    opts["select_batch"] = sz["select_batch"]
    return search_value_matrices(
        key,
        [lay for _, _, lay in settings],
        names=[m for m, _, _ in settings],
        objective=objective,
        restarts=restarts or sz["restarts"],
        steps=sz["steps"] if steps is None else steps,
        train_depth=train_depth or sz["train_depth"],
        evaluate_start=False,
        **opts,
    )


def with_value(layer, w_v):
    import equinox as eqx

    return eqx.tree_at(lambda l: l.weights.w_v, layer, jnp.asarray(w_v, jnp.float64)[None])


def census(layer, key, sz: dict) -> dict:
    """Equilibria of one found layer map (rank >= 2 listed, stable ones with their tokens): the
    full census, unstable and marginal equilibria too, as a cross-check of `attractors`."""
    from ...equilibria import JointOptions, equilibrium_census

    t0 = time.perf_counter()
    c = equilibrium_census(
        layer,
        jr.fold_in(key, 7),
        joint=JointOptions(
            starts=sz["census_starts"], chunk=sz["census_starts"], deflation_rounds=sz["deflation_rounds"]
        ),
        progress=False,
    )
    rows = []
    for e in (e for e in c.equilibria if e.rank >= 2):
        row = {
            "rank": e.rank,
            "classification": e.classification,
            "spectral_radius": float(e.spectral_radius),
            "unstable_dims": int(e.unstable_dims),
            "residual": float(e.residual),
            "starts_reaching_it": int(e.count),
        }
        if e.classification == "stable":
            row["tokens"] = np.asarray(e.tokens).tolist()
            row["singular_values"] = np.asarray(e.singular_values).tolist()
        rows.append(row)
    return {
        "by_rank": c.by_rank,
        "status_counts": {k: v for k, v in c.status_counts.items() if v},
        "rank_ge2": rows,
        "stable_rank_ge2": sum(r["classification"] == "stable" for r in rows),
        "marginal_rank_ge2": sum(r["classification"] == "marginal" for r in rows),
        "seconds": time.perf_counter() - t0,
    }


def attractors(layers, key, sz: dict) -> list[dict]:
    """Per layer: the rank >= 2 states that uniform sphere starts converge to (plain iteration to
    ``basin_depth``, converged to a residual < 1e-12), grouped modulo the layer's symmetries, each
    with its basin share (Wilson 95%) and, for the largest ``max_certificates`` groups, a
    certificate (`rankdyn._theory._certificates.certify`). A stable equilibrium is an attractor, so this
    finds every one whose basin holds a visible share of the starts (unstable and marginal ones,
    which the census also lists, are not attractors)."""
    from ..._equilibria._symmetry import group_distance, symmetry_group
    from ..._theory import _certificates as C
    from ..._theory._search_core import final_states, sphere_batch
    from ._intervals import wilson_interval

    n, d = layers[0].num_tokens, layers[0].dim
    trials, depth = sz["basin_trials"], sz["basin_depth"]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *layers)
    x0 = sphere_batch(jr.fold_in(key, 13), trials, n, d, jnp.float64)
    w = jnp.stack([lay.weights.w_v[0] for lay in layers])
    depth_a = jnp.asarray(depth, jnp.int32)
    xs, res, bad = (np.asarray(a) for a in final_states(stacked, w, x0, depth_a, depth))
    out = []
    for i, lay in enumerate(layers):
        sv = np.linalg.svd(xs[i], compute_uv=False)
        cand = np.nonzero(~bad[i] & (res[i] < 1e-12) & (sv[:, 1] > 1e-3 * sv[:, 0]))[0]
        group = symmetry_group(lay)
        reps, counts = [], []
        for j in cand:
            for k, r in enumerate(reps):
                if group_distance(xs[i, j], r, group) < 1e-6:
                    counts[k] += 1
                    break
            else:
                if len(reps) < 32:
                    reps.append(xs[i, j])
                    counts.append(1)
        classes = []
        for k in np.argsort(counts)[::-1]:
            s_k = np.linalg.svd(reps[k], compute_uv=False)
            lo, hi = wilson_interval(int(counts[k]), trials)
            e = {
                "rank": int(np.sum(s_k > 1e-3 * s_k[0])),
                "tokens": reps[k].tolist(),
                "singular_values": s_k.tolist(),
                "basin": {
                    "hits": int(counts[k]),
                    "trials": trials,
                    "wilson95": [lo, hi],
                    "depth": depth,
                    "tol": 1e-6,
                },
            }
            if len(classes) < sz["max_certificates"]:
                cert = C.certify(e["tokens"], C.layer_weights(lay), dps=sz["dps"])
                cert["basin"] = e["basin"]
                e["certificate"] = cert
                e["classification"] = "stable" if float(cert["spectral_radius"]) < 1 else "not stable"
            classes.append(e)
        out.append(
            {
                "rank_ge2": classes,
                "converged_rank_ge2_starts": int(cand.size),
                "stable_rank_ge2": sum(e.get("classification") == "stable" for e in classes),
                "proven_stable_rank_ge2": sum(
                    e.get("classification") == "stable" and e["certificate"]["proven"] for e in classes
                ),
            }
        )
    return out


def paper_values(key, settings, sz: dict, w: float) -> list:
    """The paper's bidiagonal $W_V = I + wS$ in every setting: evaluation only (steps = 0)."""
    from ..._model._weights import bidiagonal
    from ..._theory._counterexample_search import search_value_matrices

    n = settings[0][2].num_tokens
    opts = {k: sz[k] for k in ("num_layers", "eval_factor", "batch", "eval_batch")}
    res = search_value_matrices(
        key, [lay for _, _, lay in settings], steps=0, w_init=bidiagonal(n, w, jnp.float64), **opts
    )
    return [
        {
            "mean_sigma_2_T": r.before,
            "mean_sigma_2_long": r.before_long,
            "frac_rank_ge2": list(r.frac_rank_ge2_before),
        }
        for r in res
    ]
