"""The runs of `positive_measure`: Lemma 13 with token 1 frozen at $e_d$ (every step tracked) and
the joint dynamics from random inputs, as typed results."""

from __future__ import annotations

import dataclasses
import functools
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ..._run._io import to_jsonable
from .._layer_observers import observe_sigma_ratio as _observe_ratio
from .._target import Measured
from ._intervals import wilson_interval

__all__ = [
    "lemma13_track",
    "lemma13_frozen",
    "joint_fractions",
    "Lemma13Condition",
    "Fractions",
    "LemmaCase",
    "JointCase",
]


#: JSON names of the `Lemma13Condition` fields that are not Python identifiers.
_JSON_NAMES = {"within_1e_2_of_B_d": "within_1e-2_of_B_d"}


@dataclasses.dataclass(frozen=True)
class Lemma13Condition(Measured):
    """Lemma 13 starts under one reading of condition (41), token 1 at $e_d$ (`lemma13_frozen`).

    ``to_dict`` adds the non-collapse and first-step overshoot fractions with their Wilson 95%
    intervals (derived from the counts here, so they cannot disagree with them).
    """

    samples: int
    all_inputs_valid: bool
    noncollapse: int
    within_1e_2_of_B_d: int
    max_distance_to_B_d: float
    invariance_violated_any_step: int
    invariance_violated_first_step: int
    max_overshoot: float
    token1_stayed_at_e_d: bool
    min_sigma_ratio_at_T: float

    def to_dict(self) -> dict:
        # "within_1e-2_of_B_d" is the JSON's name of a field whose name cannot hold "-".
        d = {_JSON_NAMES.get(k, k): v for k, v in super().to_dict().items()}
        over = self.invariance_violated_first_step
        d["noncollapse_fraction"] = self.noncollapse / self.samples
        d["noncollapse_wilson95"] = list(wilson_interval(self.noncollapse, self.samples))
        d["first_step_overshoot_fraction"] = over / self.samples
        d["first_step_overshoot_wilson95"] = list(wilson_interval(over, self.samples))
        return d


@dataclasses.dataclass(frozen=True)
class Fractions(Measured):
    """Non-collapse counts and fractions per horizon with Wilson 95% intervals (`joint_fractions`);
    degenerate or non-finite runs are excluded from ``valid`` and counted in ``excluded``."""

    horizons: tuple[int, ...]
    counts: np.ndarray
    valid: int
    excluded: int
    fraction: np.ndarray
    wilson95: tuple[tuple[float, float], ...]


@dataclasses.dataclass(frozen=True)
class LemmaCase(Measured):
    """Lemma 13 at one $(d, w)$ ($N = 2$, token 1 at $e_d$, ``steps`` layers): per reading of
    condition (41) a `Lemma13Condition`, and the reference first-step overshoot rate."""

    d: int
    w: float
    steps: int
    conditions: dict[str, Lemma13Condition]
    spec_first_step_overshoot: float | tuple[float, float] | None

    @property
    def key(self) -> str:
        return f"lemma13 d={self.d}, w={self.w:g} (N=2, token 1 at e_d, T={self.steps})"

    def to_dict(self) -> dict:
        out = {c: r.to_dict() for c, r in self.conditions.items()}
        out["spec_first_step_overshoot"] = to_jsonable(self.spec_first_step_overshoot)
        return out


@dataclasses.dataclass(frozen=True)
class JointCase(Measured):
    """The joint dynamics at one $(N, d, w)$: `Fractions` from uniform random inputs and with token
    1 set to $e_d$, and the reference fraction at T = 20000."""

    n: int
    d: int
    w: float
    random: Fractions
    token1_at_e_d: Fractions
    spec_random_fraction_T20000: float | None

    @property
    def key(self) -> str:
        return f"joint N={self.n}, d={self.d}, w={self.w:g}"

    def to_dict(self) -> dict:
        r, e = self.random, self.token1_at_e_d
        return to_jsonable(
            {
                "horizons": r.horizons,
                "random_fraction": r.fraction,
                "random_wilson95": r.wilson95,
                "token1_at_e_d_fraction": e.fraction,
                "token1_at_e_d_wilson95": e.wilson95,
                "valid_samples": [r.valid, e.valid],
                "spec_random_fraction_T20000": self.spec_random_fraction_T20000,
            }
        )


def _token2_coord(coord):
    return jax.tree_util.Partial(lambda t, x, args, c: {"v": x[1, c]}, c=coord)


def _values(values, ok):
    return values["v"]


@eqx.filter_jit
def _track_piece(layer, x, observe, block0, num_steps: int):
    from ..._run._scan import ScanState, scan_depth

    state, v = scan_depth(layer, observe, _values, ScanState.start(x), block0, num_steps, 1, eps=False)
    return state.x, v[0], jnp.max(v, axis=0)


#: Layers per compiled piece of `lemma13_track`: bounds the (steps, batch) values held at once.
_TRACK_PIECE = 1000


def lemma13_track(layer, x0, num_steps: int, coord: int):
    r"""Iterate ``layer`` ``num_steps`` times from each ``x0[b]`` (the depth scan of `rankdyn._run._scan`)
    and track coordinate ``coord`` of token 2 at **every** step (not only at saved layers).

    Returns:
        ``(x_final, first, running_max)``: the final states, $X^{(1)}_{2,c}$ and
        $\max_{1 \le t \le T} X^{(t)}_{2,c}$ per sample (Lemma 13's invariance is
        $X^{(t)}_{2,d-1} \le -1/w$ for all t).
    """
    observe = _token2_coord(coord)
    x, first, mx, t = x0, None, None, 0
    while t < num_steps:
        steps = min(_TRACK_PIECE, num_steps - t)
        x, f, m = _track_piece(layer, x, observe, jnp.asarray(t), steps)
        first = f if first is None else first
        mx = m if mx is None else jnp.maximum(mx, m)
        t += steps
    return x, first, mx


def lemma13_frozen(
    key, d: int, w: float, batch: int, num_steps: int, conditions=("paper", "proof")
) -> dict[str, Lemma13Condition]:
    r"""Lemma 13 with token 1 at $e_d$ ($N = 2$), for both readings of condition (41).

    Returns:
        ``{condition: Lemma13Condition}`` for ``"paper"`` ($f \le \sqrt{w^2-1}$) and/or ``"proof"``
        ($f \le w^2-1$) with the number of samples, the non-collapse count at the horizon, the
        count within 1e-2 of $B_d = (0,\dots,0,-1/w,-\sqrt{1-1/w^2})$ and the largest distance
        to it (token 2 converges only algebraically for d >= 3), the
        count violating $X^{(t)}_{2,d-1} \le -1/w$ at some step / at the first step (beyond
        1e-12), the largest overshoot, and whether token 1 stayed at $e_d$.
    """
    from ..._model._weights import bidiagonal
    from ..._theory._constructions import lemma13_condition, lemma13_sample, uniform_causal_layer

    layer = uniform_causal_layer(2, d, bidiagonal(d, w))
    keys = jr.split(key, len(conditions))
    x0 = jnp.concatenate([lemma13_sample(k, d, w, batch, condition=c) for k, c in zip(keys, conditions)])
    # One compiled program (the vmap called eagerly built one per op and shape).
    valid = np.asarray(jax.jit(jax.vmap(lambda x2: lemma13_condition(x2, w, condition="proof")))(x0[:, 1]))
    xf, first, mx = (np.asarray(a) for a in lemma13_track(layer, x0, num_steps, d - 2))
    s = np.linalg.svd(xf, compute_uv=False)
    ratio = s[:, 1] / s[:, 0]
    b_d = np.zeros(d)
    b_d[-2], b_d[-1] = -1.0 / w, -math.sqrt(1.0 - 1.0 / w**2)
    e_d = np.zeros(d)
    e_d[-1] = 1.0
    dist_b = np.linalg.norm(xf[:, 1] - b_d, axis=-1)
    token1_fixed = np.linalg.norm(xf[:, 0] - e_d, axis=-1) < 1e-12
    over_any = mx > -1.0 / w + 1e-12
    over_first = first > -1.0 / w + 1e-12
    out = {}
    for j, name in enumerate(conditions):
        sl = slice(j * batch, (j + 1) * batch)
        out[name] = Lemma13Condition(
            samples=batch,
            all_inputs_valid=bool(valid[sl].all()),
            noncollapse=int((ratio[sl] > 1e-2).sum()),
            within_1e_2_of_B_d=int((dist_b[sl] < 1e-2).sum()),
            max_distance_to_B_d=float(dist_b[sl].max()),
            invariance_violated_any_step=int(over_any[sl].sum()),
            invariance_violated_first_step=int(over_first[sl].sum()),
            max_overshoot=float(np.max(mx[sl] + 1.0 / w)),
            token1_stayed_at_e_d=bool(token1_fixed[sl].all()),
            min_sigma_ratio_at_T=float(ratio[sl].min()),
        )
    return out


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _joint_inputs(key, batch: int, n: int, d: int):
    """``(2 batch, n, d)``: uniform random tokens on the sphere (normalised Gaussians, as
    ``initial_tokens(..., "sphere")``), then the same with token 1 replaced by $e_d$.

    One compiled function: eager ops each compile once per shape, which is most of a small
    run's time on a loaded 2-core machine.
    """
    g = jr.normal(key, (batch, n, d))
    x_rand = g / jnp.linalg.norm(g, axis=-1, keepdims=True)
    x_ed = x_rand.at[:, 0, :].set(jnp.zeros(d, x_rand.dtype).at[-1].set(1.0))
    return jnp.concatenate([x_rand, x_ed])


def joint_fractions(
    key, n: int, d: int, w: float, batch: int, horizons, save_every: int
) -> dict[str, Fractions]:
    r"""Non-collapse fraction against the horizon from uniform random inputs on $(\mathbb S^{d-1})^n$,
    in the joint dynamics and with token 1 set to $e_d$ (frozen there exactly).

    Returns:
        ``{"random": ..., "token1_at_e_d": ...}``, each `Fractions`: the fractions, counts and Wilson 95%
        intervals at every horizon (degenerate or non-finite runs are excluded and counted).
    """
    from ..._model._weights import bidiagonal
    from ..._run._simulate import simulate
    from ..._theory._constructions import uniform_causal_layer

    layer = uniform_causal_layer(n, d, bidiagonal(d, w))
    horizons = [int(h) for h in horizons]
    tr = simulate(
        layer,
        _joint_inputs(key, batch, n, d),
        max(horizons),
        save_every=save_every,
        observe=_observe_ratio,
        per_trajectory=True,
    )
    layers = np.asarray(tr.layers)
    idx = [int(np.flatnonzero(layers == h)[0]) for h in horizons]
    ratio = np.asarray(tr.metrics["ratio"])[:, idx]
    ok = ~np.asarray(tr.degenerate) & ~np.asarray(tr.nonfinite)
    out = {}
    for name, sl in (("random", slice(0, batch)), ("token1_at_e_d", slice(batch, 2 * batch))):
        good = ok[sl]
        cnt = ((ratio[sl] > 1e-2) & good[:, None]).sum(0)
        m = int(good.sum())
        out[name] = Fractions(
            horizons=tuple(horizons),
            counts=cnt,
            valid=m,
            excluded=int(batch - m),
            fraction=cnt / max(m, 1),
            wilson95=tuple(wilson_interval(int(c), m) for c in cnt),
        )
    return out
