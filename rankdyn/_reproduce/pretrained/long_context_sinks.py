r"""Target ``long-context-sinks``: a trained decoder at long context: mu by layer, the sink at token 0,
and the attention mass by key position ("lost in the middle").

SmolLM2-135M (default; any causal checkpoint with ``--checkpoint``) reads one excerpt of $n$ tokens
of the default corpus (quick 512, full 2048). At every layer $t$ of the trained stack, with the
attention $A^{(t,h)}$ it applies (the tokens its placement feeds the attention):

- $\mu(X^{(t)})$ (eq. 4), at depths $0..L$;
- the mass on token 0 (the causal mask's only centre), $m_0 = \operatorname{mean}_{h, i \ge 1} A_{i0}$,
  against the uniform causal baseline $u_0 = \operatorname{mean}_{i \ge 1} 1/(i+1)$;
- the profile by key position: for the last eighth of the queries ($i \ge 7n/8$, which see nearly
  the whole context), $A_{ij} (i + 1)$ (1 = uniform over the $i + 1$ visible keys), averaged over
  heads, those queries and the layers, in 16 equal bins of key position $j \in [1, n)$ (token 0,
  the sink, left out). A "lost in the middle" profile is U-shaped: high at the start and the end
  of the context, low in between.

The control, the same function as ``attention-sinks``'s (`_sink_controls.scale_matched_init`):
the stack with every matrix redrawn from a gaussian with the trained matrix's Frobenius norm and
the trained gains kept, so its logits have the trained scale and it could show a sink by itself
(rule fixed before the run: docs/theory.md, "Verdict rules fixed before the run").

Rules, fixed before the numbers were seen: (k1) the trained model has a sink: $m_0 / u_0 \ge 2$ in
more than half of the layers; (k2) the scale-matched control does not; (k3) the trained profile is
U-shaped: both its first and its last bin are at least `U_FACTOR` times the median of the middle
half of the bins (bins 4..11).

Cost: quick (512 tokens, two stacks of 30 layers) and full (2048 tokens) are measured in
docs/long-context.md. The mass on token 0 and the profile are $A P$ for a probe $P$ of
$1 + 16$ columns (`rankdyn._run._sinks.attention_times`): on the dense path (the checkpoint's
default) one layer's $A$ is a ``(heads, n, n)`` array, 151 MB in float32 at n = 2048; on the
blocked path it is never formed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _verdict as V
from .._target import Description, Measured, Rendered, off_json
from ._sink_controls import scale_matched_init
from .attention_sinks import SINK_FACTOR
from .pretrained_common import ModelRun, criterion, excerpt_ids, model_run

NAME = "long-context-sinks"
CLAIM = (
    "At long context a trained causal decoder puts an attention sink on token 0 (Theorem 1's causal centre) "
    "while layers of the same shapes redrawn at the trained weight norms do not, and its attention by key "
    "position is U-shaped ('lost in the middle': the start and the end of the context get more than the "
    "middle)."
)
CHECK_NAMES = (
    "k1: trained: attention on token 0 >= 2x the uniform causal baseline in most layers",
    "k2: scale-matched control (trained weight norms and gains): below 2x in most layers",
    "k3: trained: attention by key position is U-shaped (first and last bins >= U_FACTOR x the middle "
    "median)",
)
#: Bins of key position, and the part of the queries whose profile is taken (the last 1/8).
BINS, LAST_QUERIES = 16, 8
#: U-shaped: the first and the last bins at least this many times the median of the middle half.
U_FACTOR = 1.5


def sizes(quick: bool) -> dict:
    return {"n": 512 if quick else 2048}


@dataclasses.dataclass(frozen=True)
class LongContextSinksMeasured(Measured):
    """Per model (``trained``, ``random``: the scale-matched control of `_sink_controls`): mu at
    depths 0..L, m_0 per layer (head mean), the key position profile (``BINS`` values, 1 = uniform),
    and the uniform baseline u_0."""

    mu: dict[str, list[float]]
    mass_first: dict[str, list[float]]
    profile: dict[str, list[float]]
    uniform_first: float
    mask: str
    n: int
    run: ModelRun | None = off_json(default=None)


@eqx.filter_jit
def _scan(layer, x0, num_layers: int):
    from ..._observe._metrics import mu
    from ..._run._sinks import attention_times

    n = x0.shape[0]
    i = jnp.arange(n)
    q0 = n - n // LAST_QUERIES
    scale = (i[q0:].astype(x0.dtype) + 1.0)[:, None]
    bins = jnp.minimum((i * BINS) // n, BINS - 1)
    onehot = ((bins[:, None] == jnp.arange(BINS)[None, :]) & (i >= 1)[:, None]).astype(x0.dtype)
    # A P with P = [e_0, key-position bins] (token 0 left out of the bins): no (n, n) array on the
    # blocked path. counts: per bin, the (query >= q0, key <= query) pairs.
    probe = jnp.concatenate([(i == 0).astype(x0.dtype)[:, None], onehot], axis=1)
    counts = (n - jnp.maximum(q0, i)).astype(x0.dtype) @ onehot

    def step(x, t):
        ap = attention_times(layer, x, t, probe)  # (heads, n, 1 + BINS)
        first = jnp.mean(ap[:, 1:, 0])
        prof = jnp.sum(ap[:, q0:, 1:] * scale[None], axis=(0, 1)) / (counts * ap.shape[0])
        y = layer(x, t)[0]
        return y, (first, prof, mu(y))

    _, (first, prof, mus) = lax.scan(step, x0, jnp.arange(num_layers))
    return first, jnp.mean(prof, axis=0), jnp.concatenate([mu(x0)[None], mus])


def compute(sz: dict, seed: int, *, ckpt) -> LongContextSinksMeasured:
    """mu, the mass on token 0 and the key-position profile of the trained stack and of its scale-matched
    control on one excerpt of ``sz["n"]`` tokens (capped at the checkpoint's positions)."""
    ids, corpus = excerpt_ids(ckpt, sz["n"], 1, None)
    n = int(ids.shape[1])
    rand = scale_matched_init(ckpt, seed)  # the control attention-sinks scores too
    out = {"mu": {}, "mass_first": {}, "profile": {}}
    for name, c in (("trained", ckpt), ("random", rand)):
        first, prof, mus = _scan(c.layers(n, "full"), c.embed(ids)[0], c.num_layers)
        out["mu"][name] = np.asarray(mus, float).tolist()
        out["mass_first"][name] = np.asarray(first, float).tolist()
        out["profile"][name] = np.asarray(prof, float).tolist()
    u0 = float(np.mean(1.0 / (np.arange(1, n) + 1.0)))
    return LongContextSinksMeasured(
        **out, uniform_first=u0, mask=ckpt.own_mask, n=n, run=model_run(ckpt, corpus, ids)
    )


def _sink_share(mass, u0) -> float:
    r = np.asarray(mass, float) / u0
    r = r[np.isfinite(r)]
    return float(np.mean(r >= SINK_FACTOR)) if r.size else float("nan")


def u_shape(profile) -> tuple[bool, float, float, float]:
    """(U-shaped?, first bin, last bin, median of the middle half) of a `BINS`-bin profile."""
    p = np.asarray(profile, float)
    mid = float(np.median(p[BINS // 4 : 3 * BINS // 4]))
    ok = bool(np.all(np.isfinite(p)) and min(p[0], p[-1]) >= U_FACTOR * mid)
    return ok, float(p[0]), float(p[-1]), mid


def checks(m: LongContextSinksMeasured) -> list[V.Check]:
    """k1-k3 from the measured numbers; without a causal mask they are untestable."""
    if m.mask != "causal":
        why = f"the checkpoint's own mask is {m.mask}, not causal: token 0 is not the only centre"
        return [V.untestable(c, why) for c in CHECK_NAMES]
    out = []
    for name, model, want in ((CHECK_NAMES[0], "trained", True), (CHECK_NAMES[1], "random", False)):
        share = _sink_share(m.mass_first[model], m.uniform_first)
        ratio = np.asarray(m.mass_first[model], float) / m.uniform_first
        out.append(
            V.check(
                name,
                share > 0.5 if want else share <= 0.5,
                f"{share:.0%} of layers >= {SINK_FACTOR:g}x; median ratio {np.median(ratio):.3g}",
            )
        )
    ok, first, last, mid = u_shape(m.profile["trained"])
    out.append(
        V.check(
            CHECK_NAMES[2].replace("U_FACTOR", f"{U_FACTOR:g}"),
            ok,
            f"first bin {first:.3g}, last bin {last:.3g}, middle median {mid:.3g} (1 = uniform)",
        )
    )
    return out


def table(m: LongContextSinksMeasured) -> str:
    rows = [
        "| model | median m_0 / u_0 | layers >= 2x | mu layer 0 -> L | profile first / middle / last |",
        "|---|---|---|---|---|",
    ]
    for name in m.mu:
        r = np.asarray(m.mass_first[name], float) / m.uniform_first
        _, first, last, mid = u_shape(m.profile[name])
        rows.append(
            f"| {name} | {np.median(r):.3g} | {_sink_share(m.mass_first[name], m.uniform_first):.0%} | "
            f"{m.mu[name][0]:.3g} -> {m.mu[name][-1]:.3g} | {first:.3g} / {mid:.3g} / {last:.3g} |"
        )
    return "\n".join(rows)


def render(out: Path, m: LongContextSinksMeasured, cs: list[V.Check], *, quick: bool = False) -> Rendered:
    from ..._plotting._long_context import plot_position_profile
    from ...plotting import save_figure

    r = m.run
    fig = plot_position_profile(
        m.mu, m.profile, m.mass_first, m.uniform_first, title=f"{r.title}: {m.n} tokens, one excerpt"
    )
    figs = [save_figure(fig, out / "long_context_sinks.png")]
    ok, first, last, mid = u_shape(m.profile["trained"])
    shape = "U-shaped" if ok else "not U-shaped by the rule"
    share = {k: _sink_share(v, m.uniform_first) for k, v in m.mass_first.items()}
    notes = (
        f"Model: {r.label}; one excerpt of {m.n} tokens of {r.text}; mask {m.mask}. Trained: attention on "
        f"token 0 is >= {SINK_FACTOR:g}x uniform in {share['trained']:.0%} of layers (scale-matched control: "
        f"{share['random']:.0%}). The trained "
        f"profile by key position (last 1/{LAST_QUERIES} of the queries) is {shape}: first bin {first:.3g}, "
        f"middle median {mid:.3g}, last bin {last:.3g} (1 = uniform)."
    )
    if r.model.get("quantization"):
        notes += " The weights are dequantised from GGUF: a trained model, not the float model."
    if quick:
        notes += f" QUICK MODE: {m.n} tokens."
    return Rendered(figs, notes, table(m))


def describe(
    m: LongContextSinksMeasured, cs: list[V.Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    r = m.run
    setting = r.setting() | {
        "mask": m.mask,
        "seed": seed,
        "bins": BINS,
        "queries": f"the last 1/{LAST_QUERIES}",
        "u_factor": U_FACTOR,
        "control": "scale_matched_init (gaussian matrices at the trained Frobenius norms, trained gains)",
    }
    key = {
        f"{k} median m_0/u_0": float(np.median(np.asarray(v) / m.uniform_first))
        for k, v in m.mass_first.items()
    }
    return Description(setting, key_numbers=key, model=r.label, criterion=criterion(CHECK_NAMES))
