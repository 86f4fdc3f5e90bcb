"""The reference configurations, their model FLOPs, and how the layer and inputs are built."""

from __future__ import annotations

import os

CONFIGS = {
    # name: n, d, dqk, layers, batch, mask, per-layer weights. bert is sized to finish (an SVD of
    # one 128 x 768 matrix costs ~30 ms in LAPACK via JAX and ~160 ms in PyTorch on this CPU) and
    # to run long enough (~1.5 s a call at 32 trajectories) to measure above the host's noise.
    "small": dict(n=32, d=64, dqk=64, layers=128, batch=1024, mask="causal", per_layer=False),
    # dqk is the key width of the single head that `build` makes (d_QK = d), which the FLOP
    # counts use; `build` checks it against the layer it builds.
    "bert": dict(n=128, d=768, dqk=768, layers=16, batch=32, mask="complete", per_layer=True),
    "long": dict(n=16, d=16, dqk=16, layers=10_000, batch=128, mask="causal", per_layer=False),
}
#: ``--quick`` (the lead's final run, ~2 min on 2 cores): small and bert at full size with
#: mu-only metrics, and small's default metrics (an SVD per trajectory and layer) on 256 of
#: its trajectories; long is not run.
QUICK_CONFIGS = ("small", "bert")
QUICK_METRICS = {"small": ("mu", "default"), "bert": ("mu",)}
QUICK_DEFAULT_BATCH = 256

#: rankdyn's `metrics=` for each metric set timed: every default metric, or mu and eps_min only.
METRICS = {"default": None, "mu": "mu,eps_min"}


def config(name: str, quick: bool, metrics: str = "mu") -> dict:
    cfg = dict(CONFIGS[name])
    if os.environ.get("RANKDYN_BENCH_TINY") == "1":  # checks the script itself, in seconds
        cfg.update(layers=min(cfg["layers"], 4), batch=min(cfg["batch"], 16))
    if quick and metrics == "default":
        cfg["batch"] = min(cfg["batch"], QUICK_DEFAULT_BATCH)
    return cfg


def model_flops(cfg) -> float:
    """FLOPs of one layer for one trajectory: Q, K, V projections + QK^T + AV (not softmax, LN, metrics)."""
    n, d, k = cfg["n"], cfg["d"], cfg["dqk"]
    return 2 * n * d * k * 2 + 2 * n * d * d + 2 * n * n * k + 2 * n * n * d


def executed_flops(cfg) -> float:
    """FLOPs rankdyn actually executes per layer and trajectory (W_Q W_K^T folded when cheaper)."""
    from rankdyn._model._layer import _fold_qk

    n, d, k = cfg["n"], cfg["d"], cfg["dqk"]
    qk = 2 * n * d * d + 2 * n * n * d if _fold_qk(n, d, k) else 4 * n * d * k + 2 * n * n * k
    return qk + 2 * n * d * d + 2 * n * n * d


def build(cfg, seed: int = 0):
    """The layer and initial tokens of a configuration (float32), the same in every process."""
    import jax.numpy as jnp
    import jax.random as jr

    import rankdyn as rd

    k1, k2 = jr.split(jr.PRNGKey(seed))
    layer = rd.make_layer(
        k1,
        n=cfg["n"],
        d=cfg["d"],
        mask=cfg["mask"],
        placement="post",
        value="orthogonal",
        qk="bert",
        num_layers=cfg["layers"] if cfg["per_layer"] else None,
        dtype=jnp.float32,
    )
    x0 = rd.initial_tokens(k2, "sphere", cfg["n"], cfg["d"], batch=cfg["batch"], dtype=jnp.float32)
    # The FLOP counts (model_flops) read cfg["dqk"]: it must be the width the layer has. (It once
    # said 64 for bert while the layer was 768 wide: % of peak was 2.5x too low.)
    width = layer.weights.w_q.shape[-1]
    if width != cfg["dqk"] or float(layer.dqk) != cfg["dqk"]:
        raise ValueError(f"config says dqk {cfg['dqk']}, the layer has key width {width}, dqk {layer.dqk}")
    return layer, x0
