"""Synthetic `Measured` results, one per reproduce target that draws a figure, for the figure tests.

Each builder returns a target's typed result with made-up numbers of the shapes its ``compute``
returns (no simulation): bands ``{"mean", "std"}`` over the saved layers, per-mask and per-case
records, Wilson intervals. The figure tests hand them to the target's own ``render``, so a figure
is drawn by exactly the code the target runs. Values that a figure must handle are put in on
purpose: curves that are exactly 0 from t = 1, float32 underflow to 1e-40, a bound of exactly 1,
shares of 0, a stable certified equilibrium next to searches that found nothing.
"""

from __future__ import annotations

import dataclasses
import typing

import numpy as np

LAYERS = np.arange(0, 129)


def band(rate, *, start=30.0, floor=0.0, layers=LAYERS, zero_from=None, noise=0.0, seed=0):
    """``{"mean", "std"}``: a geometric decay ``start * rate**t`` held at ``floor``; exactly 0 from
    ``zero_from`` on; ``noise``: relative float noise on the floor part (a float32 plateau)."""
    t = np.asarray(layers, float)
    mean = np.maximum(start * rate**t, floor)
    if noise:
        at_floor = mean <= floor
        mean = np.where(at_floor, mean * (1 + noise * np.random.default_rng(seed).standard_normal(t.size)), mean)
    if zero_from is not None:
        mean = np.where(t >= zero_from, 0.0, mean)
    return {"mean": mean, "std": 0.2 * mean}


_DEFAULTS = {
    "float": 0.5,
    "int": 2,
    "bool": True,
    "str": "x",
    "tuple[int, int] | None": (1, 8),
    "tuple[float, ...]": (0.5,),
    "tuple[float, float]": (0.2, 0.8),
    "tuple[int, ...]": (0,),
    "float | None": 0.5,
    "list[float]": [0.5, 0.4, 0.3, 0.2, 0.1],
    "list[int]": [1, 2],
    "tuple": (),
}


def fill(cls, **given):
    """An instance of the dataclass ``cls`` with the ``given`` fields and plain values elsewhere
    (a float 0.5, an int 2, True, ...: see `_DEFAULTS`), for the records whose every number a
    figure does not read."""
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    kw = {}
    for name, ann in hints.items():
        if name in given:
            kw[name] = given[name]
        elif (f := next(f for f in dataclasses.fields(cls) if f.name == name)).default is not dataclasses.MISSING:
            continue
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            continue
        else:
            key = ann if isinstance(ann, str) else typing.get_type_hints(cls).get(name)
            if key not in _DEFAULTS:
                raise KeyError(f"{cls.__name__}.{name}: {key!r} has no default; give it")
            kw[name] = _DEFAULTS[key]
    return cls(**kw)


# -- the simulation targets ------------------------------------------------------------------------


def masks_collapse():
    from rankdyn.experiments._masktable import MASK_LABELS
    from rankdyn.experiments.sim import masks_collapse as T

    # complete: exactly 0 from layer 4 (after dipping below the floor); causal, global: to the
    # float32 floor; the windows: slow. Their bounds are 1 in double precision (eps^r ~ 1e-41, 1e-69).
    rates = {"complete": 0.02, "causal": 0.55, "window": 0.997, "window-uni": 0.977, "dilated": 0.97, "global": 0.8}
    bound = {"complete": (0.998, -2.7, 1), "causal": (0.997, -2.6, 1), "window": (1.0, -40.8, 32),
             "window-uni": (1.0, -68.5, 63), "dilated": (1 - 4e-11, -9.6, 6), "global": (0.99, -1.9, 2)}  # fmt: skip
    per_mask = {
        k: fill(T.MaskCollapse, fitted_rate=r, bound_rate=bound[k][0], log10_eps_pow_r=bound[k][1],
                radius=bound[k][2], mu_ratio=r**128, mu_normalized_ratio=r**128,
                avg_rate_mu_normalized=r, avg_rate_mu_normalized_early=r + 0.001 * i)  # fmt: skip
        for i, (k, r) in enumerate(rates.items())
    }
    curves = {MASK_LABELS[k]: band(r, floor=1e-6, noise=0.1, seed=i) for i, (k, r) in enumerate(rates.items())}
    curves["complete"] = band(0.02, zero_from=4)
    bands = {q: curves for q in ("mu", "mu_normalized", "mu_rel")}
    bands["row_norm_mean"] = {MASK_LABELS[k]: band(1.0, start=1 + i) for i, k in enumerate(rates)}
    setting = {"n": 64, "d": 32, "batch": 32, "depth": 128, "dtype": "float32"}
    return T, T.MasksCollapseMeasured(per_mask, len(LAYERS), LAYERS, bands, setting)


def temperature(same: bool = True):
    from rankdyn.experiments._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn.experiments.sim import temperature as T

    layers = np.arange(33)
    q = len(T.DQKS)
    rates = {m: [0.5 + 0.03 * i + 0.01 * j for j in range(q)] for i, m in enumerate(PAPER_MASKS)}
    # ``same``: two masks' mu curves coincide (the windows at a high temperature, as measured).
    curves = {
        f"d_QK = 2^{int(np.log2(d))}": {
            MASK_LABELS[m]: band(0.6 if same and i >= 2 else 0.3 + 0.1 * i, layers=layers, floor=1e-5)
            for i, m in enumerate(PAPER_MASKS)
        }
        for d in T.PAPER_DQKS
    }
    curves["d_QK = 2^0"]["complete"] = band(0.05, layers=layers, zero_from=6)
    one = {m: 0.1 for m in PAPER_MASKS}
    return T, T.TemperatureMeasured(
        early_rate=rates, late_rate=rates, median_eps_layer0={m: [0.1] * q for m in PAPER_MASKS},
        spearman={m: -0.9 for m in PAPER_MASKS}, effect_1_64_minus_64=one,
        spread_shallow=one, spread_deep=one,
        layers=layers, curves=curves, setting={"dtype": "float32", "n": 64, "d": 32, "depth": 32},
    )  # fmt: skip


def layernorm_orthogonal():
    from rankdyn.experiments._masktable import MASK_LABELS
    from rankdyn.experiments.sim import layernorm_orthogonal as T

    layers = np.arange(0, 513)
    cases, panels = {}, {}
    for p in T.PLACEMENTS:
        mu, cos = panels.setdefault(f"{p}-LN: mu", {}), panels.setdefault(f"{p}-LN: 1 - min cosine", {})
        for i, (m, kind, inside) in enumerate(T.CASES):
            label = f"{MASK_LABELS[m]} / {kind}"
            style = {"linestyle": "-" if inside else (0, (4, 3))}
            r = 0.99 if m == "window" else 0.6 + 0.05 * i
            mu[label] = band(r, start=4.0, layers=layers, floor=1e-7, noise=0.3, seed=i) | style
            cos[label] = band(r, start=1.5, layers=layers, floor=7e-8, noise=0.3, seed=i) | style
            if m == "complete":
                # Every token equal after one layer: exactly 0 from t = 1, except one sample's
                # rounding far out (the stray mark of the issue, near t ~ 355 in full mode).
                mu[label] = band(0.5, start=4.0, layers=layers, zero_from=1) | style
                c = band(0.5, start=1.5, layers=layers, zero_from=1)
                c["mean"][355] = 3e-9
                cos[label] = c | style
            cases[f"{p}/{m}/{kind}"] = fill(
                T.LayerNormCase, placement=p, mask=m, x0=kind, inside_hypotheses=inside, fitted_rate=r,
                bound_rate=1.0 if m == "window" else 0.999, log10_c_eps_pow_2r=-31.0 if m == "window" else -2.0,
                radius=15 if m == "window" else 1, bound="Theorem 2", mu_ratio=r**512, fit_window=(1, 9),
            )  # fmt: skip
    neighbours = {m: 3 for m, _, _ in T.CASES}
    setting = {"n": 16, "d": 32, "batch": 32, "depth": 512, "save_every": 1, "dtype": "float32"}
    return T, T.LayerNormMeasured(cases, 0.01, layers, panels, neighbours, setting)


def depth_table():
    from rankdyn.experiments._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn.experiments.sim import depth_table as T
    from rankdyn.experiments.sim._zero_rows import ZeroRowModel

    stats, panels = {}, {}
    for j, mode in enumerate(T.MODES):
        stats[mode] = {m: fill(T.MaskStats, ratio_T_0=0.3 + 0.1 * i) for i, m in enumerate(PAPER_MASKS)}
        panels[mode] = {MASK_LABELS[m]: band(0.97 - 0.01 * i - 0.01 * j) for i, m in enumerate(PAPER_MASKS)}
    graph = {m: {"strongly_connected": m in ("complete", "window"), "quasi_strongly_connected": True,
                 "num_centers": 1, "radius": 1} for m in PAPER_MASKS}  # fmt: skip
    mech = {m: fill(ZeroRowModel) for m in PAPER_MASKS}
    setting = {"n": 32, "d": 64, "dk": 16, "dqk": 16.0, "depth": 128, "batch": 8, "dtype": "float32",
               "table_layers": (0, 32, 64, 96, 128), "quick": True}
    return T, T.DepthTableMeasured(stats, graph, mech, LAYERS, panels, setting)


def ablation():
    """SAN rows collapse to float32 underflow (1e-40) and run in eval mode only, as measured."""
    from rankdyn.experiments._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn.experiments.sim import ablation as T
    from rankdyn.experiments.sim._ablation_runs import DROPOUT_MODES, VARIANTS

    modes = tuple(DROPOUT_MODES)
    summary, panels = {}, {}
    for label, _, ln, _ in VARIANTS:
        for i, m in enumerate(PAPER_MASKS):
            for j, p in enumerate(modes if ln else modes[:1]):
                rate = 0.25 if label == "SAN" else 0.999 - 0.003 * j - 0.002 * i
                b = band(rate, floor=1e-41 if label == "SAN" else 0.0)
                if label == "SAN" and m == "complete":
                    b = band(0.25, zero_from=5)
                panels.setdefault(f"{label}: {MASK_LABELS[m]}", {})[p] = b | {
                    "color": f"C{j}", "linestyle": ("-", "--", ":")[j]}  # fmt: skip
                summary[f"{label}|{m}|{p}"] = fill(
                    T.AblationRow, variant=label, mask=m, mode=p, ratio_shallow=rate**12, ratio_depth=rate**128,
                    shallow=12, depth=128,
                )  # fmt: skip
    masks = {m: {"strongly_connected": True, "quasi_strongly_connected": True, "num_centers": 1, "radius": 1}
             for m in PAPER_MASKS}  # fmt: skip
    setting = {"n": 32, "d": 64, "heads": 4, "batch": 8, "depth": 128, "dtype": "float32"}
    norm = {m: 0.9 for m in PAPER_MASKS}
    return T, T.AblationMeasured(summary, masks, LAYERS, panels, norm, modes, setting)


def lyapunov_rates():
    from rankdyn.experiments._masktable import PAPER_MASKS
    from rankdyn.experiments.sim import lyapunov_rates as T

    keys = [f"{p}/{m}" for p in ("none", "post") for m in PAPER_MASKS]
    lam = dict(zip(keys, (-41.2, -0.69, -0.06, -0.63, -38.4, -0.69, -0.06, -0.63)))
    return T, T.LyapunovRatesMeasured(
        exponents={k: [0.0, 0.0, v] for k, v in lam.items()}, transverse=lam,
        log_bound={k: -3e-3 / (i + 1) ** 3 for i, k in enumerate(keys)},
        bound_name={k: "Theorem 1" if k.startswith("none") else "Theorem 2" for k in keys},
        log_mu_rate={k: 0.9 * v for k, v in lam.items()}, mu_at_floor={k: 0 for k in keys},
        neutral_dims={k: 3 for k in keys}, equilibrium_errors=[1e-15],
        equilibrium_classes={"1": {"stable": 1, "marginal": 0, "unstable": 4}},
        setting={"n": 4, "d": 4, "depth": 200, "discard": 50},
    )  # fmt: skip


# -- the theory targets ----------------------------------------------------------------------------


def undirected():
    """The quick run's shape: the causal control found (and certified) a stable rank-2 state, the
    complete mask's searches found nothing (shares 0), and the stored certificates (window and
    complete masks, N = 3) re-prove."""
    from rankdyn.experiments.theory import _undirected_known as K
    from rankdyn.experiments.theory import undirected as T

    point = [["1", "0", "0"], ["0", "1", "0"], ["0.6", "0.8", "0"]]  # rank 2, unit rows
    cert = {"setting": "N=3/causal/uniform", "search": "main_sigma_2", "proven": True, "stability_proven": True,
            "spectral_radius": "0.65", "spectral_radius_bound": "0.654", "radius": "1.0e-30", "point": point,
            "basin": {"hits": 41, "trials": 1024, "wilson95": [0.03, 0.054]}}  # fmt: skip

    def cell(share, found):
        a = {"rank_ge2": [{"certificate": cert}] if found else [], "converged_rank_ge2_starts": 41 if found else 0,
             "stable_rank_ge2": int(found), "proven_stable_rank_ge2": int(found)}  # fmt: skip
        return {
            "main_sigma_2": {"mean_phi_T": 0.02 if found else 1e-16, "frac_rank_ge2": [share, share],
                             "sustained_rank_ge2": found, "sustained_full_rank": False, "attractors": a},
            "paper_W_V": {"frac_rank_ge2": [0.043, 0.043] if found else [0.0, 0.0]},
        }  # fmt: skip

    cells = {"N=3/causal/uniform": cell(0.039, True), "N=3/complete/uniform": cell(0.0, False),
             "N=3/complete/symmetric": cell(0.0, False)}  # fmt: skip
    points = tuple(
        dict(n=3, mask=m, attention=a, share=s, lo=max(s - 0.012, 0.0), hi=s + 0.015 if s else 0.0075,
             paper=cells[f"N=3/{m}/{a}"]["paper_W_V"]["frac_rank_ge2"][1])
        for m, a, s in (("causal", "uniform", 0.039), ("complete", "uniform", 0.0), ("complete", "symmetric", 0.0))
    )  # fmt: skip
    stored = tuple(
        dict(setting=c["setting"], run=c["run"], existence_proven=True, stability_proven=True,
             spectral_radius_bound=c["spectral_radius"], sigma_2=0.5, rank_ge2=True, undirected=True)
        for c in K.load(3)
    )  # fmt: skip
    return T, T.UndirectedMeasured(
        cells=cells, runs=tuple((t, "main_sigma_2") for t in cells), controls={"N=3 main sigma_2": True},
        found=tuple(K.found_sentences(stored)), certificates=(cert,), points=points, scope="scope: synthetic",
        eval_factor=5, basin_trials=1024, basin_depth=1000, census_ns=(), num_layers=200, stored=stored,
    )  # fmt: skip
