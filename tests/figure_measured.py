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
        mean = np.where(
            at_floor, mean * (1 + noise * np.random.default_rng(seed).standard_normal(t.size)), mean
        )
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
        elif (
            f := next(f for f in dataclasses.fields(cls) if f.name == name)
        ).default is not dataclasses.MISSING:
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
    from rankdyn._reproduce._masktable import MASK_LABELS
    from rankdyn._reproduce.sim import masks_collapse as T

    # complete: exactly 0 from layer 4 (after dipping below the floor); causal, global: to the
    # float32 floor; the windows: slow. Their bounds are 1 in double precision (eps^r ~ 1e-41, 1e-69).
    rates = {
        "complete": 0.02,
        "causal": 0.55,
        "window": 0.997,
        "window-uni": 0.977,
        "dilated": 0.97,
        "global": 0.8,
    }
    bound = {
        "complete": (0.998, -2.7, 1),
        "causal": (0.997, -2.6, 1),
        "window": (1.0, -40.8, 32),
        "window-uni": (1.0, -68.5, 63),
        "dilated": (1 - 4e-11, -9.6, 6),
        "global": (0.99, -1.9, 2),
    }
    per_mask = {
        k: fill(
            T.MaskCollapse,
            fitted_rate=r,
            bound_rate=bound[k][0],
            log10_eps_pow_r=bound[k][1],
            radius=bound[k][2],
            mu_ratio=r**128,
            mu_normalized_ratio=r**128,
            avg_rate_mu_normalized=r,
            avg_rate_mu_normalized_early=r + 0.001 * i,
        )
        for i, (k, r) in enumerate(rates.items())
    }
    curves = {
        MASK_LABELS[k]: band(r, floor=1e-6, noise=0.1, seed=i) for i, (k, r) in enumerate(rates.items())
    }
    curves["complete"] = band(0.02, zero_from=4)
    bands = {q: curves for q in ("mu", "mu_normalized", "mu_rel")}
    bands["row_norm_mean"] = {MASK_LABELS[k]: band(1.0, start=1 + i) for i, k in enumerate(rates)}
    setting = {"n": 64, "d": 32, "batch": 32, "depth": 128, "dtype": "float32"}
    return T, T.MasksCollapseMeasured(per_mask, len(LAYERS), LAYERS, bands, setting)


def temperature(same: bool = True):
    from rankdyn._reproduce._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn._reproduce.sim import temperature as T

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
        early_rate=rates,
        late_rate=rates,
        median_eps_layer0={m: [0.1] * q for m in PAPER_MASKS},
        spearman={m: -0.9 for m in PAPER_MASKS},
        effect_1_64_minus_64=one,
        spread_shallow=one,
        spread_deep=one,
        layers=layers,
        curves=curves,
        setting={"dtype": "float32", "n": 64, "d": 32, "depth": 32},
    )


def layernorm_orthogonal():
    from rankdyn._reproduce._masktable import MASK_LABELS
    from rankdyn._reproduce.sim import layernorm_orthogonal as T

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
                T.LayerNormCase,
                placement=p,
                mask=m,
                x0=kind,
                inside_hypotheses=inside,
                fitted_rate=r,
                bound_rate=1.0 if m == "window" else 0.999,
                log10_c_eps_pow_2r=-31.0 if m == "window" else -2.0,
                radius=15 if m == "window" else 1,
                bound="Theorem 2",
                mu_ratio=r**512,
                fit_window=(1, 9),
            )
    neighbours = {m: 3 for m, _, _ in T.CASES}
    setting = {"n": 16, "d": 32, "batch": 32, "depth": 512, "save_every": 1, "dtype": "float32"}
    return T, T.LayerNormMeasured(cases, 0.01, layers, panels, neighbours, setting)


def depth_table():
    from rankdyn._reproduce._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn._reproduce.sim import depth_table as T
    from rankdyn._reproduce.sim._zero_rows import ZeroRowModel

    stats, panels = {}, {}
    for j, mode in enumerate(T.MODES):
        stats[mode] = {m: fill(T.MaskStats, ratio_T_0=0.3 + 0.1 * i) for i, m in enumerate(PAPER_MASKS)}
        panels[mode] = {MASK_LABELS[m]: band(0.97 - 0.01 * i - 0.01 * j) for i, m in enumerate(PAPER_MASKS)}
    graph = {
        m: {
            "strongly_connected": m in ("complete", "window"),
            "quasi_strongly_connected": True,
            "num_centers": 1,
            "radius": 1,
        }
        for m in PAPER_MASKS
    }
    mech = {m: fill(ZeroRowModel) for m in PAPER_MASKS}
    setting = {
        "n": 32,
        "d": 64,
        "dk": 16,
        "dqk": 16.0,
        "depth": 128,
        "batch": 8,
        "dtype": "float32",
        "table_layers": (0, 32, 64, 96, 128),
        "quick": True,
    }
    live = {
        mode: {MASK_LABELS[m]: band(0.99 - 0.02 * i) for i, m in enumerate(PAPER_MASKS)} for mode in T.MODES
    }
    return T, T.DepthTableMeasured(stats, graph, mech, LAYERS, panels, setting, live)


def ablation():
    """SAN rows collapse to float32 underflow (1e-40) and run in eval mode only, as measured."""
    from rankdyn._reproduce._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn._reproduce.sim import ablation as T
    from rankdyn._reproduce.sim._ablation_runs import DROPOUT_MODES, VARIANTS

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
                    "color": f"C{j}",
                    "linestyle": ("-", "--", ":")[j],
                }
                summary[f"{label}|{m}|{p}"] = fill(
                    T.AblationRow,
                    variant=label,
                    mask=m,
                    mode=p,
                    ratio_shallow=rate**12,
                    ratio_depth=rate**128,
                    shallow=12,
                    depth=128,
                )
    masks = {
        m: {"strongly_connected": True, "quasi_strongly_connected": True, "num_centers": 1, "radius": 1}
        for m in PAPER_MASKS
    }
    setting = {"n": 32, "d": 64, "heads": 4, "batch": 8, "depth": 128, "dtype": "float32"}
    norm = {m: 0.9 for m in PAPER_MASKS}
    return T, T.AblationMeasured(summary, masks, LAYERS, panels, norm, modes, setting)


def lyapunov_rates():
    from rankdyn._reproduce._masktable import PAPER_MASKS
    from rankdyn._reproduce.sim import lyapunov_rates as T

    keys = [f"{p}/{m}" for p in ("none", "post") for m in PAPER_MASKS]
    lam = dict(zip(keys, (-41.2, -0.69, -0.06, -0.63, -38.4, -0.69, -0.06, -0.63)))
    return T, T.LyapunovRatesMeasured(
        exponents={k: [0.0, 0.0, v] for k, v in lam.items()},
        transverse=lam,
        transverse_early={k: v - 0.005 for k, v in lam.items()},
        limit=dict(zip(keys, (-float("inf"), -0.693, -0.07, -0.693) * 2)),
        log_bound={k: -3e-3 / (i + 1) ** 3 for i, k in enumerate(keys)},
        bound_name={k: "Theorem 1" if k.startswith("none") else "Theorem 2" for k in keys},
        outside_hypotheses={k: "Theorem 2 needs n <= d" for k in keys if k.startswith("post")},
        log_mu_rate={k: 0.9 * v for k, v in lam.items()},
        mu_at_floor={k: 0 for k in keys},
        neutral_dims={k: 3 for k in keys},
        equilibrium_errors=[1e-15],
        equilibrium_classes={"1": {"stable": 1, "marginal": 0, "unstable": 4}},
        setting={"n": 4, "d": 4, "depth": 200, "lyap_depth": 200, "discard": 100},
    )


# -- the theory targets ----------------------------------------------------------------------------


def undirected():
    """The quick run's shape: the causal control found (and certified) a stable rank-2 state, the
    complete mask's searches found nothing (shares 0), and the stored certificates (window and
    complete masks, N = 3) re-prove."""
    from rankdyn._reproduce.theory import _undirected_known as K, undirected as T

    point = [["1", "0", "0"], ["0", "1", "0"], ["0.6", "0.8", "0"]]  # rank 2, unit rows
    cert = {
        "setting": "N=3/causal/uniform",
        "search": "main_sigma_2",
        "proven": True,
        "stability_proven": True,
        "spectral_radius": "0.65",
        "spectral_radius_bound": "0.654",
        "radius": "1.0e-30",
        "point": point,
        "basin": {"hits": 41, "trials": 1024, "wilson95": [0.03, 0.054]},
    }

    def cell(share, found):
        a = {
            "rank_ge2": [{"certificate": cert}] if found else [],
            "converged_rank_ge2_starts": 41 if found else 0,
            "stable_rank_ge2": int(found),
            "proven_stable_rank_ge2": int(found),
        }
        return {
            "main_sigma_2": {
                "mean_phi_T": 0.02 if found else 1e-16,
                "frac_rank_ge2": [share, share],
                "sustained_rank_ge2": found,
                "sustained_full_rank": False,
                "attractors": a,
            },
            "paper_W_V": {"frac_rank_ge2": [0.043, 0.043] if found else [0.0, 0.0]},
        }

    cells = {
        "N=3/causal/uniform": cell(0.039, True),
        "N=3/complete/uniform": cell(0.0, False),
        "N=3/complete/symmetric": cell(0.0, False),
    }
    points = tuple(
        dict(
            n=3,
            mask=m,
            attention=a,
            share=s,
            lo=max(s - 0.012, 0.0),
            hi=s + 0.015 if s else 0.0075,
            paper=cells[f"N=3/{m}/{a}"]["paper_W_V"]["frac_rank_ge2"][1],
        )
        for m, a, s in (
            ("causal", "uniform", 0.039),
            ("complete", "uniform", 0.0),
            ("complete", "symmetric", 0.0),
        )
    )
    stored = tuple(
        dict(
            setting=c["setting"],
            run=c["run"],
            existence_proven=True,
            stability_proven=True,
            spectral_radius_bound=c["spectral_radius"],
            sigma_2=0.5,
            rank_ge2=True,
            undirected=True,
        )
        for c in K.load(3)
    )
    return T, T.UndirectedMeasured(
        cells=cells,
        runs=tuple((t, "main_sigma_2") for t in cells),
        controls={"N=3 main sigma_2": True},
        found=tuple(K.found_sentences(stored)),
        certificates=(cert,),
        points=points,
        scope="scope: synthetic",
        eval_factor=5,
        basin_trials=1024,
        basin_depth=1000,
        census_ns=(),
        num_layers=200,
        stored=stored,
    )


def counterexample_2d():
    from rankdyn._reproduce.theory import _counterexample_2d_runs as R, counterexample_2d as T
    from rankdyn._theory._constructions import example_2d

    ex = example_2d(2.0)
    th = np.linspace(0, 1.2, 40)
    path = np.stack([np.cos(th), np.sin(th)], -1)
    states = np.stack([path, path[::-1]], 1)  # (S, 2 tokens, 2)
    angles = np.arange(0, 360, 2.0)
    basins = {
        w: fill(
            R.BasinRun,
            angles=angles,
            outcome=(angles > 120) & (angles < 270),
            basin_predicted_arc_deg=(121.0, 270.0),
            basin_measured_arc_deg=(120.0, 270.0),
            basin_boundary_error_deg=(1.0, 0.0),
            first_token_t_w_x11_at_end=(0.5,),
        )
        for w in (1.5, 2.0, 3.0)
    }
    hor = (100, 1000, 5000)
    theta1, theta2 = np.linspace(-88, 88, 45), np.arange(0, 360, 8.0)
    grid = (theta1[:, None] > 20) & (np.abs(theta2[None] - 200) < (theta1[:, None] - 20))
    joints = {
        w: fill(
            R.JointRun,
            horizons=hor,
            noncollapse_fraction=np.array([0.071] * 3),
            wilson95=((0.062, 0.082),) * 3,
            fraction_token2_near_B=np.array([0.07] * 3),
            theta1=theta1,
            theta2=theta2,
            noncollapse=np.stack([grid] * 3),
            spec_fraction_at_20000=0.071,
        )
        for w in (2.0,)
    }
    noln = {
        k: fill(R.NoLNRun, row_norm_T=np.ones(2), states=s * states)
        for k, s in (("W_V", 2.0), ("W_V/||W_V||_2", 0.5))
    }
    return T, T.Counterexample2DMeasured(
        basins=basins,
        joints=joints,
        noln=noln,
        fig1_starts={"non-collapsing": (75.0, 200.0), "collapsing": (30.0, 200.0)},
        fig1_sigma_ratio={"non-collapsing": 0.5, "collapsing": 1e-9},
        basin_step_deg=2.0,
        fig1_w=2.0,
        fig1_example=ex,
        fig1_states_ln=np.stack([states, states]),
    )


def equilibria_ranks():
    from rankdyn._reproduce.theory import _equilibria_runs as R, equilibria_ranks as T

    fams = []
    for n, w in ((3, 3.0), (4, 4.0)):
        k = np.repeat(np.arange(1, n + 1), 2 ** np.arange(1, n + 1))
        arrays = {
            "k": k,
            "stable_rank": 1 + 0.3 * (k - 1),
            "spectral_radius": 1 + 0.1 * k,
            "classification": np.where(k == 1, "marginal", "unstable"),
            "neutral_dims": np.ones_like(k),
            "contracting_dims": np.ones_like(k),
            "sigma_k_rel": 0.5**k,
        }
        per_k = {
            j: fill(
                R.RankSummary,
                count=2**j,
                distinct=2**j,
                expected=2**j,
                max_residual=1e-15,
                ranks=[j],
                classification={"unstable": 2**j},
            )
            for j in range(1, n + 1)
        }
        census = fill(
            R.Census,
            by_rank={str(j): 2**j for j in range(1, n + 1)},
            by_rank_and_class={
                str(j): {"stable": 0, "marginal": 0, "unstable": 2**j} for j in range(1, n + 1)
            },
            closed_form_classes_by_rank={str(j): 2**j for j in range(1, n + 1)},
            members=None,
        )
        fams.append(
            fill(
                R.RankFamily,
                n=n,
                w=w,
                per_k=per_k,
                full_rank_stable_rank_max=1.5,
                full_rank_bound=2.0,
                census=census,
                arrays=arrays,
            )
        )
    return T, T.EquilibriaRanksMeasured(tuple(fams), fill(T.WorkedExample))


def positive_measure():
    from rankdyn._reproduce.theory import _positive_measure_runs as R, positive_measure as T

    hor = (100, 500)

    def fr(f, lo, hi):
        return fill(
            R.Fractions,
            horizons=hor,
            counts=np.array([int(400 * f)] * 2),
            valid=400,
            fraction=np.array([f, f]),
            wilson95=((lo, hi),) * 2,
        )

    cond = {
        "paper": fill(R.Lemma13Condition, samples=64, noncollapse=30, invariance_violated_any_step=2),
        "proof": fill(R.Lemma13Condition, samples=64, noncollapse=64, invariance_violated_any_step=0),
    }
    lemma = tuple(
        fill(R.LemmaCase, d=d, w=w, conditions=cond, spec_first_step_overshoot=None)
        for d, w in ((3, 2.0), (3, 4.0), (4, 3.0))
    )
    # token 1 at e_d: every start kept (1.0), the interval's top at 1 (a clipped bar would show).
    joint = tuple(
        fill(R.JointCase, n=n, d=n, w=w, random=fr(f, f / 2, 1.5 * f), token1_at_e_d=fr(1.0, 0.99, 1.0))
        for n, w, f in ((2, 2.0, 0.078), (3, 2.0, 0.015), (3, 4.0, 0.05), (4, 4.0, 0.01))
    )
    return T, T.PositiveMeasureMeasured(lemma, joint)


def bifurcation():
    from types import SimpleNamespace as NS

    from rankdyn._reproduce.theory import bifurcation as T

    def branch(w0, fold):
        # A fold at ``fold``: the parameter turns back there; stable before it, unstable after.
        s = np.linspace(0, 2, 41)
        params = w0 + (fold - w0) * (1 - (s - 1) ** 2)
        y = 0.2 + 0.3 * s
        points = np.stack([np.diag([1.0, v]) for v in y])
        bif = NS(
            kind="fold",
            param=fold,
            point=points[20],
            step=19,
            located=True,
            bracket=(params[19], params[20]),
            coefficient=float("nan"),
            criticality="",
        )
        return NS(params=params, points=points, stable=s < 1, bifurcations=(bif,), param_name="w")

    branches = (branch(2.0, 3.2), branch(2.0, 2.6))
    summ = tuple(
        fill(T.BranchSummary, family=f, status="successful", folds=(fo,), branch_points=(), other=())
        for f, fo in (("a", 3.2), ("b", 2.6))
    )
    return T, T.BifurcationMeasured(
        p=0.5,
        closed_form={"a": 3.2, "b": 2.6},
        census_classes=2,
        w_branches=summ,
        p_branch=fill(T.BranchSummary, family="p", folds=(), branch_points=(0.25,), other=()),
        bert_branches=(),
        branches=branches,
        phase_w=tuple(np.linspace(2.0, 3.4, 15)),
        phase_s=tuple(np.linspace(0.0, 2.0, 11)),
        phases=_pair_phases(np.linspace(2.0, 3.4, 15), np.linspace(0.0, 2.0, 11)),
    )


def design_fold():
    from types import SimpleNamespace as NS

    from rankdyn._reproduce.theory import design_fold as T

    def branch(w0, fold):
        # A fold at ``fold``: the parameter turns back there; stable before it, unstable after.
        s = np.linspace(0, 2, 41)
        params = w0 + (fold - w0) * (1 - (s - 1) ** 2)
        points = np.stack([np.array([[0.0, 1.0], [np.cos(v), np.sin(v)]]) for v in -1.0 - 0.6 * s])
        bif = NS(
            kind="fold",
            param=fold,
            point=points[20],
            step=19,
            located=True,
            bracket=(params[19], params[20]),
            coefficient=float("nan"),
            criticality="",
        )
        return NS(params=params, points=points, stable=s < 1, bifurcations=(bif,), param_name="w")

    design = T.Design(
        w_target=0.9,
        status="successful",
        delta=((0.001, 0.002), (-0.0144, -0.0026)),
        norm=0.0147,
        iterations=14,
        reduced_gradient=4e-10,
        projected_gradient=1e-10,
        multiplier=0.03,
        fold_ift=0.9,
        continued_folds=(0.9,),
        probe_min_increase=1e-6,
        branch=branch(1.0, 0.9),
    )
    return T, T.DesignFoldMeasured(0.9682458366, 0.9682458366, (design,), branch(1.3, 0.9682458366))


def _pair_phases(ws, ss):
    # Rank-2 equilibria of family a beyond w = 3.2 - s / 4, of family b beyond 2.6; one stable in a.
    count = np.zeros((ss.size, ws.size, 2, 3), int)
    count[..., 0] = 1
    count[..., 0, 2] = 2 * (ws[None] > 3.2 - ss[:, None] / 4)
    count[..., 1, 2] = 2 * (ws[None] > 2.6)
    stable = np.zeros_like(count)
    stable[..., 0, 0] = 1
    stable[..., 0, 2] = count[..., 0, 2] // 2
    return {"count": count, "stable": stable}


# -- the flow targets ------------------------------------------------------------------------------


def _staircases(betas, seed=0):
    """``examples[label] = (clusters, energy)``, 4 starts x saves, and the save times (t = 0 first)."""
    rng = np.random.default_rng(seed)
    times = np.concatenate([[0.0], np.geomspace(0.1, 3000.0, 60)])
    out = {}
    for b in betas:
        steps = np.sort(rng.uniform(0.5, 3.0, (4, 3)), axis=1)
        clusters = np.stack([4 - np.searchsorted(s, np.log10(times + 1e-3)) for s in steps]).astype(float)
        out[f"beta={b:g}"] = (clusters, -clusters + 0.01 * rng.standard_normal(clusters.shape))
    return times, out


def flow_clustering():
    from rankdyn._reproduce.flow import flow_clustering as F

    betas = (0.5, 1.0, 2.0, 3.0)
    times = np.concatenate([[0.0], np.geomspace(0.1, 3000.0, 40)])
    frac = np.clip((np.log10(times[None] + 1e-3) + 1) / 3 * (1 + 0.2 * np.arange(4)[:, None]), 0, 1)
    return F, F.FlowClusteringMeasured(
        betas=betas,
        final_fraction=tuple(float(f) for f in frac[:, -1]),
        final_clusters_max=(1.0, 1.0, 1.0, 2.0),
        median_time_to_cluster=(30.0, 40.0, 50.0, 80.0),
        steps_limit_hit=(0, 0, 0, 0),
        drift=1e-12,
        times=times,
        fraction=frac,
        batch=48,
    )


def flow_metastability():
    from rankdyn._reproduce.flow import flow_metastability as F

    betas = (1.0, 4.0, 9.0)
    times, ex = _staircases(betas)
    rng = np.random.default_rng(2)
    # Ten runs per beta: log-normal around e^(1 + 0.5 beta); the largest beta has 3 runs censored at T.
    dur = [np.exp(1.0 + 0.5 * b + 0.3 * rng.standard_normal(10)) for b in betas]
    cens = [np.arange(10) < (3 if b == 9.0 else 0) for b in betas]
    per_beta = tuple(
        fill(F.PlateauStats, beta=b, plateau_k=(2,), final_clusters=(1,), median_plateau=float(np.median(d)),
             durations=tuple(d), censored=tuple(c))
        for b, d, c in zip(betas, dur, cens)
    )  # fmt: skip
    saddle = fill(F.PlateauState, kind="saddle", eigenvalues_real=(0.1, -0.2), max_real=0.1)
    return F, F.FlowMetastabilityMeasured(
        per_beta=per_beta,
        fit_c=0.5,
        fit_a=1.0,
        saddles=(saddle,),
        steps_limit_hit=(0, 0, 0),
        drift=1e-12,
        times=times,
        examples=ex,
    )


def flow_causal():
    from rankdyn._reproduce.flow import flow_causal as F

    betas = (1.0, 4.0)
    times, ex = _staircases(betas, seed=1)
    # 8 runs per beta: distances decaying like t^-1 (beta 1) and t^-0.5 (beta 4); 2 of the slow ones stall.
    rate = np.array([1.0, 0.5])[:, None, None]
    scale = np.geomspace(0.5, 2.0, 8)[None, :, None]
    dist = np.minimum(2.0, scale * (times[None, None] + 1e-3) ** -rate) * np.array([1.0, 0.2])[:, None, None]
    dist[1, :2] = np.maximum(dist[1, :2], 0.05)
    per_beta = tuple(
        fill(F.CausalBeta, beta=b, converged_fraction=float(np.mean(d[:, -1] <= F.EPS)))
        for b, d in zip(betas, dist)
    )
    return F, F.FlowCausalMeasured(
        first_token_displacement=0.0,
        per_beta=per_beta,
        steps_limit_hit=(0, 0),
        times=times,
        examples=ex,
        distances=dist,
    )


def flow_limit():
    from rankdyn._reproduce.flow import flow_limit as L

    hs = (0.1, 0.05, 0.025, 0.0125)
    settings = {
        k: L.SettingErrors(errors=tuple(float(c * h) for h in hs), order=1.0)
        for k, c in (("causal", 1.0), ("complete", 1.05))
    }
    return L, L.FlowLimitMeasured(hs=hs, settings=settings)


# -- the pretrained targets (a made-up checkpoint record: no checkpoint is read) --------------------


def _run(n=128, batch=8, arch="bert"):
    from rankdyn._reproduce.pretrained.pretrained_common import ModelRun

    model = {
        # A known checkpoint's record carries its name (`model_setting`); the file is not a name.
        "name": {"bert": "all-MiniLM-L6-v2", "llama": "SmolLM2-135M-Instruct (GGUF Q4_1)"}.get(arch, arch),
        "arch": arch,
        "path": "/x/model.zip",
        "sha256": "53aa51172d14" + "0" * 52,
        "own_mask": "complete",
        "num_layers": 6,
        "d": 384,
        "heads": 12,
        "dtype": "float32",
    }
    corpus = {"name": "CPython docs", "python": "3.11.7", "sha256": "ab" * 32, "excerpts": batch}
    return ModelRun(model, f"{arch} model.zip", corpus, n, batch)


def geometry():
    from rankdyn._reproduce.pretrained import geometry as G

    L = 7
    t = np.arange(L, dtype=float)
    spectra = np.stack([[np.geomspace(10.0, 0.1 + 0.1 * layer, 32) for layer in range(L)] for _ in range(3)])
    cos = np.random.default_rng(0).uniform(-0.2, 1.0, (3, 16, 16))
    bands = {
        "num_rank": {"mean": np.full(L, 128.0), "std": np.zeros(L)},
        "sigma_min": band(0.9, layers=t),
        "mean_abs_cos": {"mean": 0.1 + 0.1 * t, "std": 0.02 * np.ones(L)},
        "stable_rank": {"mean": 20 - 2 * t, "std": np.ones(L)},
    }
    return G, G.GeometryMeasured(
        num_rank_min=128.0,
        num_rank=bands["num_rank"]["mean"],
        sigma_min=bands["sigma_min"]["mean"],
        sigma_max=10 * np.ones(L),
        mean_abs_cos=bands["mean_abs_cos"]["mean"],
        stable_rank=bands["stable_rank"]["mean"],
        spectra_excerpts=np.array([0, 3, 5]),
        spectra=spectra,
        initial_min_cos=cos.min(axis=(1, 2)),
        initial_fraction_nonneg=0.0,
        full_rank=128,
        rank_tol=1e-6,
        bands=bands,
        initial_cosines=cos,
        run=_run(),
    )


def pretrained_ablation():
    from rankdyn._reproduce._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn._reproduce.pretrained import pretrained_ablation as P

    t = np.arange(7)
    panels, summary = {}, {}
    for v, label in P.VARIANTS.items():
        panels[label] = {
            MASK_LABELS[m]: band(1.0 if "LN" in label else 0.05 * (i + 1), start=110, layers=t, floor=1e-5)
            for i, m in enumerate(PAPER_MASKS)
        }
        for m in PAPER_MASKS:
            summary[f"{label}|{m}"] = fill(P.AblationRow, variant=label, mask=m, nonfinite=0)
    return P, P.PretrainedAblationMeasured(
        summary=summary, layers=t, depth=6, own=6, panels=panels, run=_run()
    )


def pretrained_temperature():
    from rankdyn._reproduce._masktable import MASK_LABELS, PAPER_MASKS
    from rankdyn._reproduce.pretrained import pretrained_temperature as P

    t = np.arange(7)
    ratio, panels = {}, {}
    for i, m in enumerate(PAPER_MASKS):
        for j, f in enumerate(P.FACTORS):
            b = band(0.9 - 0.1 * j - 0.05 * i, start=100, layers=t)
            ratio[f"{m}|{P._fmt(f)}"] = b["mean"] / b["mean"][0]
            panels.setdefault(MASK_LABELS[m], {})[f"d_QK x {P._fmt(f)}"] = b
    return P, P.PretrainedTemperatureMeasured(
        ratio=ratio, layers=t, trained_dqk=32.0, panels=panels, run=_run()
    )


def attention_sinks():
    from rankdyn._reproduce.pretrained import attention_sinks as A
    from rankdyn._run._sinks import SinkStats

    L, H = 30, 9
    rng = np.random.default_rng(0)

    def stats(level):
        return SinkStats(
            mass_first=level * rng.uniform(0.5, 1.5, (L, H)) / 64,
            mass_centers=np.full((L, H), 1 / 64),
            uniform_first=1 / 64,
            uniform_centers=1 / 64,
            cos_first=np.linspace(0.1, 0.6, L + 1) * level / 20,
            cos_others=np.linspace(0.1, 0.4, L + 1) * level / 20,
            centers=(0,),
        )

    s = {"trained full": stats(20.0), "trained san": stats(5.0), "scale-matched full": stats(1.0)}
    return A, A.AttentionSinksMeasured(s, {k: 0 for k in s}, "causal", run=_run(64, 8, "llama"))


def long_context_radius():
    from rankdyn._reproduce.sim import long_context_radius as R

    t = list(range(0, 401, 4))
    runs, rho, lam, w, radius, curves = [], [], [], [], [], {}
    for n in (256, 512):
        for r in (2, 4, 8):
            g = 0.5 / r**2
            runs.append(f"window n={n} r={r}")
            rho.append(1 - g)
            lam.append(1 - g * 1.001)
            w.append(n // (2 * r))
            radius.append(r)
    runs.append("causal n=512")
    rho, lam, w, radius = rho + [0.5], lam + [0.5], w + [0], radius + [1]
    for name, p in zip(runs, rho):
        curves[name] = (t, [max(p**s, 1e-16) if s < 300 else 0.0 for s in t])
    n = len(runs)
    return R, R.LongContextRadiusMeasured(
        runs=runs, n=[256] * n, w=w, radius=radius, rho=rho, lambda2=lam, eps=[1e-6] * n,
        log10_eps_r=[-6.0 * r for r in radius], theorem1=[1.0] * n, exponent=2.0, exponent_se=0.01,
        exponent_lambda2=2.0,
        curves=curves, setting={"ns": (256, 512), "depth": 400},
    )  # fmt: skip


def critical_temperature():
    from rankdyn._reproduce.sim import critical_temperature as C

    ns, dims = [256, 512, 1024, 2048], [3, 4, 8, 64]
    law = [2 / (d - 1) for d in dims]
    beta_c = [[0.4 * n**s for n in ns] for s in law]
    grid = [[list(np.geomspace(0.1, 10 * n, 28)) for n in ns] for _ in dims]
    curves = [
        [list(1 / (1 + (b / np.asarray(g)) ** 2)) for b, g in zip(bc, gr)] for bc, gr in zip(beta_c, grid)
    ]
    curves = [[list(1 - np.asarray(c)) for c in row] for row in curves]
    return C, C.CriticalTemperatureMeasured(
        ns=ns, dims=dims, beta_c=beta_c, exponent=law, exponent_se=[0.01] * 4, law=law,
        beta_c_over_log_n=[[b / np.log(n) for b, n in zip(bc, ns)] for bc in beta_c], grid=grid,
        curves=curves, setting={"rows": 2048},
    )  # fmt: skip


def long_context_sinks():
    from rankdyn._reproduce.pretrained import long_context_sinks as S

    layers = 30
    mu = {
        "trained": list(np.geomspace(60, 1.5e4, layers + 1)),
        "random": list(np.geomspace(60, 240, layers + 1)),
    }
    first = {"trained": list(np.full(layers, 0.3)), "random": list(np.full(layers, 0.012))}
    prof = {"trained": list(np.r_[0.15, np.full(13, 0.3), 3.8, 8.8]), "random": list(np.ones(S.BINS))}
    return S, S.LongContextSinksMeasured(
        mu=mu, mass_first=first, profile=prof, uniform_first=0.0122, mask="causal", n=512,
        run=_run(512, 1, "llama"),
    )  # fmt: skip


def normalisation_speed():
    from rankdyn._reproduce.flow import normalisation_speed as S

    t = np.concatenate([[0.0], np.geomspace(0.01, 100.0, 31)])
    depth = np.arange(33)
    rates = {"post": 2.0, "pre": 0.1, "mix": 0.12, "peri": 0.11, "ngpt": 1.0, "lns": 0.5}
    # As measured: post falls to 1e-29 (below the solver's floor 8e-21), pre and peri coincide.
    flow = {s: np.maximum(1e-6 * np.exp(-r * t), 1e-29) for s, r in rates.items()}
    flow["peri"] = flow["pre"] * 1.001
    layers = {s: 1e-2 * np.exp(-r * depth) for s, r in rates.items()}
    rows = tuple(S.SchemeRate(s, S.CLASS[s], 1.0, 100.0, 10, 10.0 / r) for s, r in rates.items())
    ckpt = {s: v[:13] * (1 + 0.5 * i) for i, (s, v) in enumerate(layers.items())}
    return S, S.NormalisationSpeedMeasured(
        flow=rows,
        steps_limit_hit=0,
        layers_final={s: float(v[-1]) for s, v in layers.items()},
        checkpoint_final=None,
        checkpoint="all-MiniLM-L6-v2 (bert, 6 layers, sha256 53aa51172d14)",
        curves={"flow": (t, flow), "layers": (depth, layers), "checkpoint": (depth[:13], ckpt)},
        var_floor=S.floor(8),
    )


def noisy_transition():
    from rankdyn._reproduce.theory import noisy_transition as T

    def case(dynamics, beta, folds):
        # A clustered branch from 0.8 sigma_c that folds at max(folds) and meets the uniform state at 1.
        s = np.linspace(-1, 1, 41)
        top = max(folds)
        sig = 0.8 + (top - 0.8) * (1 - s**2) if top > 1 else 0.8 + 0.2 * (1 - s**2)
        sc = T.sigma_c(beta, dynamics)
        return fill(
            T.CaseMeasured,
            dynamics=dynamics,
            beta=beta,
            sigma_c=sc,
            bessel_ratio=T.bessel_ratio(beta),
            uniform_status="parameter_end",
            branch_points=(sc,),
            other=(),
            mode_thresholds=(sc,),
            folds=tuple(f * sc for f in folds),
            cluster_status="parameter_end",
            cluster_order=0.9,
            curve_sigma=tuple(sig),
            curve_order=tuple((0.9 if dynamics == "usa" else 0.7) * s),
            curve_stable=tuple(bool(v) for v in np.abs(s) > 0.5),
        )

    cases = (case("usa", 2.0, (1.0,)), case("usa", 3.0, (1.0057, 1.0, 1.0057)), case("sa", 2.0, (1.0,)))
    return T, T.NoisyTransitionMeasured(num_modes=24, cases=cases)


def mean_field_limit():
    from rankdyn._reproduce.flow import mean_field_limit as M

    ns = (64, 128, 256, 512)
    rng = np.random.default_rng(0)
    w1 = tuple(tuple(float(v) for v in 1.6 / np.sqrt(n) * np.exp(0.3 * rng.standard_normal(8))) for n in ns)
    w0 = tuple(tuple(0.26 + 0.2 * v for v in row) for row in w1)
    p, interval = M.fit_exponent(ns, w1, 0)
    cells = (np.arange(M.CELLS) + 0.5) * 2 * np.pi / M.CELLS
    rho0 = M.start_density(cells)
    rho_t = np.exp(1.8 * np.cos(cells))
    rho_t /= rho_t.mean() * 2 * np.pi
    angles = np.mod(rng.vonmises(0.0, 1.8, size=512), 2 * np.pi)
    return M, M.MeanFieldLimitMeasured(
        ns, w1, w0, p, interval, "successful", 0.0, (0,), tuple(rho_t), tuple(rho0), tuple(angles)
    )


def equiangular():
    from rankdyn._reproduce.flow import equiangular as E
    from rankdyn.theory import equiangular_cosine, one_layer_cosine, one_layer_limit

    t = np.linspace(0.0, 2.0, 9)
    flow = {}
    for dyn in ("sa", "usa"):
        for beta in E.FLOW_BETAS:
            want = equiangular_cosine(t, beta, 5, rho0=E.RHO0, dynamics=dyn, gap=True)
            flow[f"{dyn}, beta={beta:g}"] = (t, want * (1 + 1e-12), want)
    pl_t = np.concatenate([[0.0], np.geomspace(0.05, 1e3, 24)])
    laws = {
        "post": np.exp(-2 * pl_t),
        "pre": 1.2 / np.maximum(pl_t, 1) ** 2,
        "lns": 160 * np.exp(-4 * np.sqrt(pl_t + 1)),
    }
    placements = {pl: (pl_t, g, g) for pl, g in laws.items()}
    ns = np.array([1e2, 1e3, 1e4, 1e5, 1e6])
    long = {}
    for p in E.LONG_PS:
        g = p / (1 - 0.3)
        long[f"rho=0.3, p={p:g}"] = (
            ns,
            np.abs(one_layer_cosine(0.3, g * np.log(ns), ns) - one_layer_limit(0.3, g)),
        )
    rows = {pl: {"law": "exp", "exponent": 2.0, "prefactor": 1.0, "t_end": 7.0, "ratio": 1.0} for pl in laws}
    return E, E.EquiangularMeasured(
        flow_err={"sa": {"0.0": 1e-11}}, flow_compared={"sa": {"0.0": 9}}, layer_err=2e-16,
        long_slopes={"rho=0.3, p=1": -1.0}, long_monotone={"rho=0.3, p=1": True}, sim_err=3e-15,
        placements=rows, steps_limit_hit=[0], curves={"flow": flow, "placements": placements, "long": long},
    )  # fmt: skip
