r"""Target ``normalisation-speed``: how fast each normalisation scheme clusters the tokens.

Karagodin, Ge, Polyanskiy and Rigollet (arXiv 2510.22026v2, §4.3, Theorem 4.3 (ii), as
transcribed in the Lean formalisation ``fxeqxmulfx/transformer``; the paper's own text of §4 was
not reachable here, docs/theory.md#the-flows-normalisation-schemes): for $V = I$,
$\|Q^\top K\| \le 1$ and a start in a cone $\langle\theta_j(0), \theta_k(0)\rangle \ge 1 - \delta$,
$\delta < 1/(100 n^2\beta^2)$, the spread $\mathrm{Var}(t) = \frac1n\sum_k|\theta_k - \bar\theta|^2$
obeys $\frac{d}{dt}\mathrm{Var} = -\Theta(\mathrm{Var}/\mathrm{scale}(t))$ with scale $1$ for Post-LN,
$t$ for Pre-LN, Mix-LN and Peri-LN, $\sqrt t$ for LN-Scaling ("CoD") and $\alpha_t^{\mp1}$ for nGPT.
So post-LN (and nGPT at a fixed $\alpha$) clusters exponentially, LN-Scaling like
$e^{-c\sqrt t}$, and pre-, mix- and peri-LN only polynomially: the clustering speeds are ordered
post > lns > {pre, mix, peri}.

Measured, with the rules fixed before any run:

1. **The flow** (`rankdyn.flow`, the theorem's own setting: $Q = K = V = I$, complete mask, a cone
   start satisfying its $\delta$): the local rate $\lambda(t) = -d\log\mathrm{Var}/dt$ between saved
   times, fitted as $\lambda \propto t^{-p}$ over the saved times with $t \ge$ `T_MIN` and
   $\mathrm{Var} \ge 1000\, d\,$`ATOL`$^2$ (above the solver's resolution), a window spanning at
   least a factor `SPAN` in $t$. Check per scheme: $|p - p^*| \le$ `TOL_P` with $p^* = 0$ (post,
   ngpt), $1/2$ (lns), $1$ (pre, mix, peri); the classes differ by at least $1/2$, so the check
   tells them apart. Check of the order: the time at which the median Var first falls to `DROP`
   $\times$ its start is smallest for post, then lns, then every one of pre, mix, peri.
2. **Random layers** (`rankdyn.make_layer`: complete mask, random BERT-like $W_Q, W_K$ shared by all
   schemes, $W_V = I$, sphere norm, the same cone start): the median Var at the last depth is
   ordered post < lns < min(pre, mix, peri).
3. **A trained checkpoint re-normalised** (MiniLM when installed: `ckpt.layers(n, placement=P)`, its
   trained LayerNorm kept, the sphere norm for ngpt; text excerpts): the same order at the last depth.
   Without the checkpoint this check is not testable here.

The paper's sizes are not known here (its experiments section was not reachable); the sizes below
are ours. nGPT is left out of the order: with a constant $\alpha$ its rate $\alpha_t^{\mp1}$ is a
constant inside $\Theta$, in post-LN's class.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from ..._observe._tolerances import round_off_floor
from .._target import Description, Measured, Rendered, off_json
from .._verdict import Check, check, untestable
from ._flow_runs import step_limit_check

NAME = "normalisation-speed"
CLAIM = (
    "Karagodin, Ge, Polyanskiy, Rigollet (arXiv 2510.22026v2, §4.3, Theorem 4.3 (ii), as transcribed in a "
    "public Lean formalisation): d/dt Var = -Theta(Var / scale(t)) with scale 1 (Post-LN), t (Pre-, Mix-, "
    "Peri-LN), sqrt t (LN-Scaling), alpha_t (nGPT): post-LN clusters fastest, then LN-Scaling, then "
    "pre/mix/peri."
)
SCHEMES = ("post", "pre", "mix", "peri", "ngpt", "lns")
#: The theorem's exponent p* of the rate lambda(t) ~ t^-p per scheme.
CLASS = {"post": 0.0, "ngpt": 0.0, "lns": 0.5, "pre": 1.0, "mix": 1.0, "peri": 1.0}
SLOW = ("pre", "mix", "peri")
ALPHA, TAU, BETA = 0.5, 2.0, 1.0
#: Fit window: Var above the floor, t from T_MIN (after mix's switch TAU, and r(t) ~ t for pre/peri).
#: The floor is 1000 d ATOL^2: the solver resolves each coordinate to about ATOL, so a Var of d ATOL^2
#: is noise (a fixed 1e-24 was below it at d = 16: the first full run fitted post and nGPT on noise).
SPAN, TOL_P, DROP, RTOL, ATOL = 10.0, 0.2, 1e-6, 1e-9, 1e-12
T_MIN = {"post": 1.0, "ngpt": 1.0, "lns": 1.0, "pre": 2 * TAU, "mix": 2 * TAU, "peri": 2 * TAU}
CONE = 1e-3  # start: theta_j = (e_1 + CONE g_j) / |.|, so 1 - <theta_j, theta_k> ~ 1e-6 < 1/(100 n^2 beta^2)


def sizes(quick: bool) -> dict:
    if quick:
        sz = dict(n=16, d=8, batch=2, t1=100.0, saves=31, depth=32, ckpt_n=16, ckpt_batch=1, ckpt_depth=12)
    else:
        sz = dict(
            n=32, d=16, batch=8, t1=1000.0, saves=81, depth=128, ckpt_n=64, ckpt_batch=16, ckpt_depth=48
        )
    # schemes: the ones run (post and lns always; tests run fewer); ckpt_n = 0 skips the checkpoint.
    return dict(sz, schemes=list(SCHEMES))


@dataclasses.dataclass(frozen=True)
class SchemeRate(Measured):
    """One scheme on the flow: the fitted exponent p, the window it was fitted on, and the time at
    which the median Var first fell to `DROP` times its start (inf if never)."""

    scheme: str
    p: float
    t_lo: float
    t_hi: float
    points: int
    t_drop: float


@dataclasses.dataclass(frozen=True)
class NormalisationSpeedMeasured(Measured):
    """The flow's `SchemeRate` rows and step-limit count; the median Var at the last depth of the
    random layers and of the checkpoint (None without one). Off the JSON: the curves."""

    flow: tuple[SchemeRate, ...]
    steps_limit_hit: int
    layers_final: dict
    checkpoint_final: dict | None
    checkpoint: str | None = None
    curves: dict | None = off_json(default=None)
    #: The flow's Var floor (`floor`): its panel shades the Var the solver does not resolve.
    var_floor: float | None = off_json(default=None)


def spread(theta) -> np.ndarray:
    r"""$\frac1n\sum_k|\theta_k - \bar\theta|^2$ of the directions of ``(..., n, d)`` tokens (differences,
    not $1 - |\bar\theta|^2$, which cancels catastrophically near a cluster)."""
    u = np.asarray(theta) / np.linalg.norm(theta, axis=-1, keepdims=True)
    return np.mean(np.sum((u - u.mean(axis=-2, keepdims=True)) ** 2, axis=-1), axis=-1)


def cone_starts(seed: int, batch: int, n: int, d: int) -> np.ndarray:
    """``(batch, n, d)`` unit tokens in a cone around $e_1$ (the theorem's start)."""
    g = np.random.default_rng(seed).normal(size=(batch, n, d))
    x = np.eye(d)[0] + CONE * g
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def floor(d: int) -> float:
    """The smallest Var the fit reads: 1000 d ATOL^2 (the solver's resolution, squared and summed)."""
    return 1e3 * d * ATOL**2


def fit_exponent(times, var, t_min: float, var_floor: float) -> tuple[float, float, float, int]:
    """``(p, t_lo, t_hi, points)``: lambda = -dlog Var/dt between saved times, fitted as t^-p over the
    intervals with both ends at t >= t_min and Var >= var_floor (NaN if fewer than 3 or lambda <= 0)."""
    t, v = np.asarray(times, float), np.asarray(var, float)
    keep = (t[:-1] >= t_min) & (v[:-1] >= var_floor) & (v[1:] >= var_floor)
    if keep.sum() < 3:
        return float("nan"), float("nan"), float("nan"), int(keep.sum())
    with np.errstate(divide="ignore", invalid="ignore"):  # Var = 0 past the kept window
        lam = -np.diff(np.log(v))[keep] / np.diff(t)[keep]
    mid = np.sqrt(t[:-1] * t[1:])[keep]
    lo, hi = float(t[:-1][keep].min()), float(t[1:][keep].max())
    if np.any(lam <= 0):
        return float("nan"), lo, hi, int(keep.sum())
    slope = np.polyfit(np.log(mid), np.log(lam), 1)[0]
    return float(-slope), lo, hi, int(keep.sum())


def _flow(sz: dict, seed: int):
    from ..._model._masks import complete_mask
    from ...flow import FlowField, solve_flow

    times = np.concatenate([[0.0], np.geomspace(0.01, sz["t1"], sz["saves"] - 1)])
    x0 = cone_starts(seed, sz["batch"], sz["n"], sz["d"])
    rows, curves, hit = [], {}, 0
    for s in sz["schemes"]:
        kw = {"mix": {"mix_time": TAU}, "ngpt": {"ngpt_alpha": ALPHA}}.get(s, {})
        field = FlowField(complete_mask(sz["n"]), sz["d"], "sa", placement=s, **kw)
        sol = solve_flow(
            field, x0, beta=BETA, times=times, rtol=RTOL, atol=ATOL, max_steps=20000, save_states=True
        )
        hit += int(np.sum(sol.steps_limit_hit))
        var = np.median(spread(np.asarray(sol.states)), axis=0)  # (S,)
        p, lo, hi, k = fit_exponent(times, var, T_MIN[s], floor(sz["d"]))
        fell = np.nonzero(var <= DROP * var[0])[0]
        rows.append(SchemeRate(s, p, lo, hi, k, float(times[fell[0]]) if fell.size else float("inf")))
        curves[s] = var
    return tuple(rows), hit, times, curves


def _layers(sz: dict, seed: int):
    import jax

    from ..._model._build import make_layer
    from ..._run._simulate import simulate

    x0 = cone_starts(seed + 1, sz["batch"], sz["n"], sz["d"])
    key = jax.random.key(seed)
    final, curves = {}, {}
    for s in sz["schemes"]:
        kw = {"mix": {"mix_layers": sz["depth"] // 8}, "ngpt": {"ngpt_alpha": ALPHA}}.get(s, {})
        skip = {"skip": True} if s in ("post", "pre", "mix") else {}
        layer = make_layer(
            key,
            n=sz["n"],
            d=sz["d"],
            mask="complete",
            placement=s,
            ln="sphere",
            value="identity",
            **skip,
            **kw,
        )
        traj = simulate(layer, x0, sz["depth"], save_states=True)
        curves[s] = np.median(spread(np.asarray(traj.states)), axis=0)
        final[s] = float(curves[s][-1])
    return final, curves


def _checkpoint(sz: dict):
    from ...checkpoints import default_corpus, load_checkpoint, minilm_path

    path = minilm_path()
    if path is None or sz["ckpt_n"] == 0:
        return None, None, None
    ckpt = load_checkpoint(path)
    n = min(sz["ckpt_n"], ckpt.max_positions)
    ids = ckpt.tokenize_text(default_corpus().text, n, sz["ckpt_batch"])
    from ..._run._simulate import simulate

    x0 = ckpt.embed(ids)
    final, curves = {}, {}
    for s in sz["schemes"]:
        kw = {"mix": {"mix_layers": ckpt.num_layers // 2}, "ngpt": {"ngpt_alpha": ALPHA, "ln": "sphere"}}.get(
            s, {}
        )
        traj = simulate(ckpt.layers(n, placement=s, **kw), x0, sz["ckpt_depth"], save_states=True)
        curves[s] = np.median(spread(np.asarray(traj.states)), axis=0)
        final[s] = float(curves[s][-1])
    return final, curves, checkpoint_title(ckpt)


def checkpoint_title(ckpt) -> str:
    """The checkpoint's panel title: the model by its name when it is a known checkpoint (not its
    file: "bert model.zip"), its architecture, depth and sha256 prefix (docs/figures.md)."""
    from ..._trained._installed import known_model_name

    name = known_model_name(ckpt.path) or Path(ckpt.path).name
    return f"{name} ({ckpt.arch}, {ckpt.num_layers} layers, sha256 {ckpt.sha256[:12]})"


def compute(sz: dict, seed: int) -> NormalisationSpeedMeasured:
    rows, hit, times, flow_curves = _flow(sz, seed)
    final, layer_curves = _layers(sz, seed)
    ck_final, ck_curves, ck_name = _checkpoint(sz)
    curves = {"flow": (times, flow_curves), "layers": (np.arange(sz["depth"] + 1), layer_curves)}
    if ck_curves is not None:
        curves["checkpoint"] = (np.arange(sz["ckpt_depth"] + 1), ck_curves)
    return NormalisationSpeedMeasured(rows, hit, final, ck_final, ck_name, curves, floor(sz["d"]))


def _ordered(values: dict) -> tuple[bool, str]:
    """post < lns < min(pre, mix, peri) (those run), and the numbers."""
    slow = [s for s in SLOW if s in values]
    ok = values["post"] < values["lns"] < min(values[s] for s in slow)
    return ok, ", ".join(f"{s} {values[s]:.3g}" for s in ["post", "lns"] + slow)


def checks(m: NormalisationSpeedMeasured) -> list[Check]:
    """Strict checks of the measured numbers (pure: tested on synthetic results)."""
    out = []
    for r in m.flow:
        span = r.t_hi / r.t_lo if r.t_lo > 0 else float("nan")
        out.append(
            check(
                f"flow, {r.scheme}: exponent p within {TOL_P} of {CLASS[r.scheme]:g}, window >= x{SPAN:g}",
                abs(r.p - CLASS[r.scheme]) <= TOL_P and span >= SPAN,
                f"p = {r.p:.3f} on t in [{r.t_lo:.3g}, {r.t_hi:.3g}] ({r.points} intervals)",
            )
        )
    drop = {r.scheme: r.t_drop for r in m.flow}
    ok, detail = _ordered(drop)
    out.append(check(f"flow: time for Var to fall x{DROP:g} ordered post < lns < pre, mix, peri", ok, detail))
    out.append(step_limit_check([m.steps_limit_hit]))
    ok, detail = _ordered(m.layers_final)
    out.append(check("random layers: Var at the last depth ordered post < lns < pre, mix, peri", ok, detail))
    name = "trained checkpoint re-normalised: Var at the last depth ordered post < lns < pre, mix, peri"
    if m.checkpoint_final is None:
        out.append(untestable(name, "no trained checkpoint installed (rankdyn checkpoints --get minilm)"))
    else:
        ok, detail = _ordered(m.checkpoint_final)
        out.append(check(name, ok, detail))
    return out


def render(out: Path, m: NormalisationSpeedMeasured, cs: list[Check], *, quick: bool = False) -> Rendered:
    """One figure (a panel per setting, a curve per scheme) and notes from the numbers."""
    from ..._plotting._normalisation import plot_scheme_spread

    labels = {"flow": ("time t", True), "layers": ("depth", False), "checkpoint": ("depth", False)}
    titles = {"flow": "flow, Q=K=V=I", "layers": "random layers, W_V=I", "checkpoint": m.checkpoint or ""}
    panels = {titles[k]: (*labels[k], x, c) for k, (x, c) in (m.curves or {}).items()}
    # The floors (docs/figures.md): the flow's solver resolves Var to 1000 d atol^2; a float64 stack
    # resolves a direction to its round-off, so Var (a squared distance) to that floor squared.
    squared = (round_off_floor(np.float64) ** 2, "float64 round-off floor, squared (Var)")
    floors = {titles["layers"]: squared, titles["checkpoint"]: squared}
    if m.var_floor is not None:
        floors[titles["flow"]] = (m.var_floor, f"solver resolution: 1000 d atol^2 = {m.var_floor:.1g}")
    plot_scheme_spread(
        panels,
        title="normalisation schemes: spread of the directions",
        floors=floors,
        path=out / "normalisation_speed.png",
    )
    failed = [c.name for c in cs if c.testable and not c.passed]
    run = [r.scheme for r in m.flow]
    notes = "Flow rate exponents p (theorem: " + ", ".join(f"{s} {CLASS[s]:g}" for s in run) + "): "
    notes += ", ".join(f"{r.scheme} {r.p:.2f}" for r in m.flow) + "."
    notes += " " + (
        "Every testable check passed." if not failed else "Not reproduced: " + "; ".join(failed) + "."
    )
    return Rendered(["normalisation_speed.png"], notes)


def describe(
    m: NormalisationSpeedMeasured, cs: list[Check], sz: dict, *, seed: int, quick: bool
) -> Description:
    setting = dict(
        sz, beta=BETA, ngpt_alpha=ALPHA, mix_time=TAU, cone=CONE, floor=floor(sz["d"]), t_min=T_MIN
    )
    setting |= dict(
        mask="complete",
        flow_qkv="identity",
        layers="qk bert, value identity, ln sphere, skip for post/pre/mix",
    )
    setting |= dict(
        checkpoint=m.checkpoint,
        solver=f"tsit5 rtol {RTOL:g} atol {ATOL:g}",
        seed=seed,
        quick=quick,
        dtype="float64",
    )
    return Description(setting, key_numbers={f"flow p, {r.scheme}": r.p for r in m.flow})
