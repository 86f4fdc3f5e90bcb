r"""The PyTorch baseline: an eager loop over layers, as peers write it, computing rankdyn's metrics.

Post-LN attention (eq. 3: $X \leftarrow \mathrm{LN}(A(X) X W_V)$ with rows put on the unit
sphere), a Python loop over layers of batched tensor ops under ``torch.no_grad()``. At every
layer it keeps, per trajectory, the same metrics rankdyn records (``"mu"``: $\mu$ of eq. 4 and
Theorem 1's $\epsilon$; ``"default"``: also the other 12 collapse metrics, the spectral ones
from ``torch.linalg.svdvals``), then reduces them to mean, std, min and max over the batch.
"""

from __future__ import annotations

import math

import numpy as np


def torch_inputs(torch, dev, layer, x0):
    """rankdyn's weights, mask and tokens as float32 tensors (the head axis of size 1 dropped)."""
    w = layer.weights
    conv = lambda a: torch.from_numpy(np.array(a, dtype=np.float32)).to(dev)  # noqa: E731
    mask = torch.from_numpy(np.array(layer.mask)).to(dev)
    return (
        conv(x0),
        conv(w.w_q[..., 0, :, :]),
        conv(w.w_k[..., 0, :, :]),
        conv(w.w_v[..., 0, :, :]),
        mask,
        float(layer.dqk),
    )


def _metrics(torch, x, which: str, rank_tol: float) -> dict:
    """rankdyn's `collapse_metrics` (or mu only) of a batch ``(b, n, d)`` -> name -> ``(b,)``."""
    centred = x - x.mean(dim=1, keepdim=True)
    out = {"mu": centred.flatten(1).norm(dim=1)}
    if which == "mu":
        return out
    n = x.shape[1]
    fro = x.flatten(1).norm(dim=1)
    nrm = x.norm(dim=-1)
    u = x / torch.where(nrm > 0, nrm, torch.ones_like(nrm))[..., None]
    cos = u @ u.transpose(1, 2)
    s = torch.linalg.svdvals(x)  # descending
    s0 = torch.where(s[:, 0] > 0, s[:, 0], torch.ones_like(s[:, 0]))
    p = s / torch.where(s.sum(1) > 0, s.sum(1), torch.ones_like(s[:, 0]))[:, None]
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))), torch.zeros_like(p))
    out |= {
        "mu_rel": out["mu"] / torch.where(fro > 0, fro, torch.ones_like(fro)),
        "mu_normalized": (u - u.mean(dim=1, keepdim=True)).flatten(1).norm(dim=1),
        "row_norm_mean": nrm.mean(1),
        "row_norm_min": nrm.amin(1),
        "min_cos": cos.flatten(1).amin(1),
        "mean_abs_cos": (cos.abs().sum((1, 2)) - cos.diagonal(dim1=1, dim2=2).abs().sum(1))
        / max(n * (n - 1), 1),
        "sigma_max": s[:, 0],
        "sigma_min": s[:, -1],
        "sigma_ratio": s[:, 1] / s0,
        "stable_rank": ((s / s0[:, None]) ** 2).sum(1),
        "num_rank": (s > rank_tol * s[:, :1]).sum(1).to(x.dtype),
        "eff_rank": torch.exp(-plogp.sum(1)),
    }
    return out


#: The two formulations peers write; the benchmark keeps the faster one as the baseline.
FORMS = ("matmul", "einsum")


def _layer(torch, x, q_w, k_w, v_w, mask, dqk, form):
    """One post-LN layer on a batch ``(b, n, d)``: attention matrices and new tokens."""
    if form == "einsum":
        q, k, v = (torch.einsum("bnd,dk->bnk", x, w) for w in (q_w, k_w, v_w))
        scores = torch.einsum("bnk,bmk->bnm", q, k) / math.sqrt(dqk)
    else:
        scores = (x @ q_w) @ (x @ k_w).transpose(1, 2) / math.sqrt(dqk)
        v = x @ v_w
    a = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    y = torch.einsum("bnm,bme->bne", a, v) if form == "einsum" else a @ v
    return a, y / y.norm(dim=-1, keepdim=True)  # the paper's LN: rows onto the unit sphere


def torch_simulate(
    torch, x0, wq, wk, wv, mask, dqk, num_layers, per_layer, which="mu", rank_tol=1e-6, form="matmul"
):
    """Run ``num_layers`` layers; return (name -> ``(b, layers + 1)`` per trajectory, name -> batch stats).

    ``form`` is ``"matmul"`` (batched ``@``) or ``"einsum"`` (`FORMS`).

    ``eps_min`` at layer t > 0 is the smallest attention weight on mask edges of layer t - 1,
    at layer 0 that of the first attention matrix, as rankdyn records it.
    """
    x = x0
    keep = {k: [v] for k, v in _metrics(torch, x, which, rank_tol).items()}
    eps = []
    with torch.no_grad():
        for t in range(num_layers):
            q_w, k_w, v_w = (wq[t], wk[t], wv[t]) if per_layer else (wq, wk, wv)
            a, x = _layer(torch, x, q_w, k_w, v_w, mask, dqk, form)
            eps.append(a.masked_fill(~mask, float("inf")).amin(dim=(1, 2)))
            for k, v in _metrics(torch, x, which, rank_tol).items():
                keep[k].append(v)
        per = {k: torch.stack(v, dim=1) for k, v in keep.items()}
        if eps:
            per["eps_min"] = torch.stack([eps[0]] + eps, dim=1)
        stats = {
            k: {"mean": v.mean(0), "std": v.std(0, unbiased=False), "min": v.amin(0), "max": v.amax(0)}
            for k, v in per.items()
        }
    return per, stats


def agreement(torch, layer, x0, cfg, which: str, check_layers: int) -> dict:
    """Max relative error of PyTorch against rankdyn (same weights and tokens) over a short run.

    mu and eps_min must agree to 1e-3 (relative, with a floor at 1e-3 of the initial mu: collapsed
    states agree only to float32 rounding); with the default metrics sigma_max too.
    """
    import jax

    import rankdyn as rd

    from ._configs import METRICS

    tx, wq, wk, wv, mask, dqk = torch_inputs(torch, "cpu", layer, x0)
    tr = rd.simulate(layer, x0, check_layers, metrics=METRICS[which], per_trajectory=True)
    jax.block_until_ready(tr.metrics)
    floor = 1e-3 * np.abs(np.asarray(tr.metrics["mu"])[:, :1])
    names = ("mu", "eps_min") + (("sigma_max", "stable_rank", "min_cos") if which == "default" else ())
    errs = dict.fromkeys(names, 0.0)
    for form in FORMS:  # the largest error of either formulation
        per, _ = torch_simulate(
            torch, tx, wq, wk, wv, mask, dqk, check_layers, cfg["per_layer"], which, form=form
        )
        for k in names:
            ref = np.asarray(tr.metrics[k])
            got = per[k].cpu().numpy()
            den = np.maximum(np.abs(ref), floor) if k == "mu" else np.maximum(np.abs(ref), 1e-6)
            errs[k] = max(errs[k], float(np.max(np.abs(got - ref) / den)))
    return {"layers": check_layers, "max_rel_err": errs, "ok": all(errs[k] < 1e-3 for k in ("mu", "eps_min"))}
