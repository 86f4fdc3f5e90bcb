"""``rankdyn flow``: the self-attention flow on the sphere (continuous time), integrated with Diffrax.

Writes ``metrics.json`` (``times`` and one value per saved time for every metric, with the config,
seed and provenance), ``flow.png``, and with ``--save-states`` ``states.npy`` shaped
``(batch, saves, n, d)`` from t = 0 (batch first, as ``rankdyn simulate``;
earlier versions wrote ``(saves, batch, n, d)``). Q = K = V = I on the command line (the API takes any).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from .._errors import UsageError
from .._flow._scheme_arguments import FLOW_PLACEMENTS
from .._model._names import MASK_NAMES
from ._checks import HelpFormatter, check_out_dir, check_seed_flag, say_compiling

#: The flow's schemes (the layer's placements but ``none``), from their JAX-free definition.
FLOW_PLACEMENT_CHOICES = FLOW_PLACEMENTS

SOLVER_NAMES = ("tsit5", "dopri5", "euler", "rk4", "heun", "spark", "geodesic_heun")
#: The Stratonovich SDE solvers of ``--noise`` (`rankdyn._flow._noise.NOISE_SOLVERS`).
NOISE_SOLVER_NAMES = ("heun", "spark", "geodesic_heun")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "flow",
        help="integrate the continuous-time self-attention flow on the sphere",
        description="Integrate the SA or USA flow dx_i/dt = P_{x_i}(sum_j a_ij x_j) on the sphere (Q = K = V "
        "= I) "
        "for a batch of uniform random starts; save metrics per saved time (metrics.json) and a figure "
        "(flow.png).",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--dynamics", choices=("sa", "usa"), default="sa", help="normalised (sa) or 1/n (usa) weights"
    )
    p.add_argument("--mask", choices=MASK_NAMES, default="complete", help="attention mask graph")
    p.add_argument(
        "--placement",
        choices=FLOW_PLACEMENT_CHOICES,
        default="post",
        help="normalisation scheme of the flow, by its speed-regulation factor s_j(t) (docs/theory.md): "
        "post (the flow on the sphere), pre, mix, peri (the radius moves), ngpt, lns",
    )
    p.add_argument(
        "--ngpt-alpha", type=float, default=None, metavar="ALPHA", help="nGPT's rate alpha > 0 (ngpt only)"
    )
    p.add_argument(
        "--mix-time",
        type=float,
        default=None,
        metavar="TAU",
        help="the time tau >= 0 at which mix turns from post- to pre-LN (mix only; an adaptive --solver)",
    )
    p.add_argument("--n", type=int, default=32, help="number of tokens (>= 1)")
    p.add_argument("--d", type=int, default=3, help="token dimension (>= 2: the sphere S^(d-1))")
    p.add_argument(
        "--beta", type=float, default=1.0, help="inverse temperature beta, finite and >= 0 (one value)"
    )
    p.add_argument("--time", type=float, default=10.0, help="time horizon T > 0")
    p.add_argument("--batch", type=int, default=64, help="number of trajectories (>= 1)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of the starts (and of --mask random)")
    p.add_argument(
        "--solver",
        choices=SOLVER_NAMES,
        default=None,
        help="adaptive (tsit5, the default, dopri5) or fixed-step (euler, rk4); with --noise the "
        "Stratonovich heun (fixed step, the default with --dt), geodesic_heun (fixed step, keeps every "
        "|x_i|) or spark (adaptive, the default without)",
    )
    p.add_argument(
        "--noise",
        type=float,
        default=None,
        metavar="SIGMA",
        help="noise level sigma >= 0: the Stratonovich SDE dx_i = F_i dt + sigma P_{x_i} o dW_i "
        "(Brownian paths from --seed); records the order parameter and low harmonics in O(n d)",
    )
    p.add_argument(
        "--common-noise",
        action="store_true",
        help="with --noise: one d x d matrix Brownian motion shared by all tokens, "
        "sigma P_{x_i}(dW_t A_i(X)) (arXiv 2601.21942)",
    )
    p.add_argument(
        "--rtol", type=float, default=None, help="relative tolerance, adaptive solvers (default 1e-6)"
    )
    p.add_argument(
        "--atol", type=float, default=None, help="absolute tolerance, adaptive solvers (default 1e-8)"
    )
    p.add_argument(
        "--dt",
        type=float,
        default=None,
        help="step of the fixed-step solvers (euler, rk4; with --noise heun, geodesic_heun), > 0",
    )
    p.add_argument("--saves", type=int, default=101, help="number of saved times, uniform on [0, T] (>= 2)")
    p.add_argument("--x64", action="store_true", help="compute in float64")
    p.add_argument(
        "--save-states", action="store_true", help="write states.npy, (batch, saves, n, d) from t = 0"
    )
    p.add_argument(
        "--lyapunov",
        type=int,
        default=None,
        metavar="K",
        help="also the top K Lyapunov exponents (variational equation, QR at every saved time): "
        "lyapunov.json, spectrum.png, convergence.png",
    )
    p.add_argument("--out", type=Path, default=Path("out/flow"), help="output folder")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    """Every rule on the flags, before any compute (one `UsageError` naming the flag)."""
    if args.n < 1:
        raise UsageError(f"--n must be >= 1 (number of tokens), got {args.n}.")
    if args.d < 2:
        raise UsageError(f"--d must be >= 2 (tokens live on the sphere S^(d-1)), got {args.d}.")
    if not (math.isfinite(args.beta) and args.beta >= 0):
        raise UsageError(f"--beta must be finite and >= 0, got {args.beta}.")
    if not (math.isfinite(args.time) and args.time > 0):
        raise UsageError(f"--time must be finite and > 0 (the horizon T), got {args.time}.")
    if args.batch < 1:
        raise UsageError(f"--batch must be >= 1, got {args.batch}.")
    if args.saves < 2:
        raise UsageError(f"--saves must be >= 2 (t = 0 and t = T at least), got {args.saves}.")
    check_seed_flag(args.seed)
    _check_noise_flags(args)
    _check_scheme_flags(args)
    adaptive = args.solver in ("tsit5", "dopri5", "spark")
    if adaptive and args.dt is not None:
        raise UsageError(
            f"--dt applies to the fixed-step solvers (euler, rk4) only; --solver {args.solver} is adaptive."
        )
    if not adaptive:
        if args.dt is None:
            raise UsageError(
                f"--solver {args.solver} is fixed-step: give its step with --dt (e.g. --dt 0.1)."
            )
        if not (math.isfinite(args.dt) and args.dt > 0):
            raise UsageError(f"--dt must be finite and > 0, got {args.dt}.")
        for flag in ("rtol", "atol"):
            if getattr(args, flag) is not None:
                raise UsageError(
                    f"--{flag} applies to the adaptive solvers (tsit5, dopri5) only, not --solver "
                    f"{args.solver}."
                )
    for flag in ("rtol", "atol"):
        v = getattr(args, flag)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"--{flag} must be finite and > 0, got {v}.")
    from .._flow._arguments import check_beta_range

    check_beta_range(args.beta, "float64" if args.x64 else "float32", args.dynamics)
    if args.lyapunov is not None and not 1 <= args.lyapunov <= args.n * (args.d - 1):
        raise UsageError(
            f"--lyapunov {args.lyapunov}: expected 1 <= K <= n(d-1) = {args.n * (args.d - 1)} (the tangent "
            "space of the spheres)."
        )
    check_out_dir(args.out)


def _check_noise_flags(args) -> None:
    """``--noise`` with its solver (``--solver`` resolved here: its default depends on ``--noise``)."""
    if args.noise is None:
        if args.common_noise:
            raise UsageError("--common-noise needs --noise SIGMA, the noise level.")
        if args.solver in NOISE_SOLVER_NAMES:
            raise UsageError(
                f"--solver {args.solver} is a solver of the noisy flow: add --noise SIGMA, or use tsit5, "
                "dopri5, euler or rk4."
            )
        args.solver = args.solver or "tsit5"
        return
    if not (math.isfinite(args.noise) and args.noise >= 0):
        raise UsageError(f"--noise must be finite and >= 0 (the noise level sigma), got {args.noise}.")
    if args.solver is None:
        args.solver = "heun" if args.dt is not None else "spark"
    if args.solver == "euler":
        raise UsageError(
            "--solver euler with --noise: Diffrax's Euler converges to the Ito solution, another SDE here "
            "(it leaves the sphere); use --solver geodesic_heun --dt DT, --solver heun --dt DT or --solver "
            "spark (Stratonovich)."
        )
    if args.solver not in NOISE_SOLVER_NAMES:
        raise UsageError(
            f"--solver {args.solver} is not an SDE solver; with --noise use --solver geodesic_heun --dt DT "
            "or --solver heun --dt DT (fixed step) or --solver spark (adaptive)."
        )
    if args.placement in ("pre", "mix", "peri"):
        raise UsageError(
            f"--noise applies to the placements that stay on the sphere (post, ngpt, lns), not "
            f"--placement {args.placement}, which moves the radius."
        )
    if args.lyapunov is not None:
        raise UsageError("--lyapunov follows the deterministic flow; drop it or drop --noise.")


def _check_scheme_flags(args) -> None:
    """``--placement`` with ``--ngpt-alpha`` / ``--mix-time``, in the flags' names."""
    from .._flow._scheme_arguments import check_scheme_arguments

    try:
        check_scheme_arguments(args.placement, args.ngpt_alpha, args.mix_time)
    except UsageError as err:
        msg = str(err).replace("ngpt_alpha", "--ngpt-alpha").replace("mix_time", "--mix-time")
        raise UsageError(msg.replace("placement='", "--placement '")) from None
    if args.placement == "mix" and args.mix_time >= args.time:
        raise UsageError(
            f"--mix-time {args.mix_time:g} is not before --time {args.time:g}: the switch from post- to "
            "pre-LN never happens; use a --mix-time below --time (or --placement post)."
        )
    if args.placement == "mix" and args.solver in ("euler", "rk4"):
        raise UsageError(
            f"--placement mix switches the field at --mix-time, and --solver {args.solver} steps over the "
            "switch; use an adaptive solver (--solver tsit5 or dopri5), which steps to it."
        )
    if args.lyapunov is not None and args.placement != "post":
        raise UsageError(
            f"--lyapunov follows the flow on the sphere (--placement post); --placement {args.placement} "
            "is not supported there."
        )


def flow_plan(args):
    """The run's `rankdyn.plans.FlowPlan` from the flags (no JAX): its sizes and memory estimate,
    the deterministic or the noisy flow, in the flags' names."""
    from .._flow._plan import FlowPlan

    return FlowPlan(
        n=args.n, d=args.d, batch=args.batch, saves=args.saves, itemsize=8 if args.x64 else 4,
        noise=args.noise is not None, save_states=args.save_states, flags=True,
    )  # fmt: skip


def run(args) -> int:
    check_args(args)
    # Before the mask, the field or the starts exist (JAX loads here for the backend's memory).
    flow_plan(args).check_memory()
    import jax
    import jax.numpy as jnp
    import numpy as np

    from .._model._masks import make_mask
    from .._run._io import CompileTimer, atomic_write, provenance, write_json
    from ..flow import FlowField, solve_flow

    mask = make_mask(args.mask, args.n, seed=args.seed)
    field = FlowField(
        mask,
        args.d,
        args.dynamics,
        placement=args.placement,
        ngpt_alpha=args.ngpt_alpha,
        mix_time=args.mix_time,
    )
    dtype = jnp.float64 if args.x64 else jnp.float32
    x0 = jax.random.normal(jax.random.key(args.seed), (args.batch, args.n, args.d), dtype)
    say_compiling("flow", "the flow's solver program")
    with CompileTimer() as timer:
        sol = solve_flow(
            field,
            x0,
            args.time,
            beta=args.beta,
            saves=args.saves,
            solver=args.solver,
            rtol=args.rtol,
            atol=args.atol,
            dt=args.dt,
            save_states=args.save_states,
            progress=not args.no_progress,
            **_noise_arguments(args),
        )
        jax.block_until_ready(sol.summary)
    ttc = np.asarray(sol.time_to_cluster)
    hit = int(sol.steps_limit_hit)
    result = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"},
        "seed": args.seed,
        "q_k_v": "identity",
        "times": np.asarray(sol.times),
        "metrics": sol.summary.to_dict(),
        "count": np.asarray(sol.summary.count).astype(int),
        "time_to_cluster": {
            "eps": float(sol_eps()),
            "fraction_reached": float(np.mean(np.isfinite(ttc))),
            "median": float(np.median(ttc)) if np.isfinite(ttc).any() else None,
            "per_trajectory": [float(v) if np.isfinite(v) else None for v in ttc],
        },
        "solver": {
            "name": args.solver,
            "num_steps": int(sol.num_steps),
            "steps_limit_hit": hit,
            "drift_from_sphere": float(sol.drift),
        },
        "flags": {"nonfinite": int(sol.summary.nonfinite), "batch": args.batch},
        "noise": None
        if args.noise is None
        else {
            "sigma": args.noise,
            "common": args.common_noise,
            "key": f"fold_in(jax.random.key({args.seed}), {NOISE_KEY_SALT}), then fold_in by trajectory",
            "order_parameter_final_mean": float(sol.summary.mean["order_parameter"][-1]),
        },
        "timing": {"compile_s": timer.compile_s, "run_s": timer.run_s},
        "provenance": provenance(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    if args.save_states:
        atomic_write(args.out / "states.npy", lambda f: np.save(f, np.asarray(sol.states)))
        result["states_file"] = "states.npy"
    write_json(args.out / "metrics.json", result)
    if args.lyapunov is not None:
        _lyapunov(args, field, x0)
    from ..plotting import plot_flow_metrics

    scheme = "" if args.placement == "post" else f", placement={args.placement}"
    title = (
        f"{args.dynamics.upper()} flow{scheme}, {args.mask} mask, n={args.n}, d={args.d}, beta={args.beta:g}"
    )
    plot_flow_metrics(sol.times, result["metrics"], title=title, path=args.out / "flow.png")
    m = result["metrics"]
    if args.noise is not None:
        print(
            f"flow: {args.batch} trajectories to T = {args.time:g} with noise sigma = {args.noise:g}; order "
            f"parameter |mean x_i| (mean) {m['order_parameter']['mean'][0]:.3g} -> "
            f"{m['order_parameter']['mean'][-1]:.3g}; {_drift_words(field, sol)} (never renormalised); "
            f"{int(sol.num_steps)} solver steps; wrote {args.out / 'metrics.json'}"
        )
        return _warn_hit(args, hit)
    print(
        f"flow: {args.batch} trajectories to T = {args.time:g}; clusters (mean) "
        f"{m['clusters']['mean'][0]:.3g} -> "
        f"{m['clusters']['mean'][-1]:.3g}; one cluster (diameter <= eps) reached by "
        f"{result['time_to_cluster']['fraction_reached']:.1%}; {_drift_words(field, sol)}; "
        f"{int(sol.num_steps)} solver steps; wrote {args.out / 'metrics.json'}"
    )
    return _warn_hit(args, hit)


#: What ``--seed`` is folded with for the Brownian paths of ``--noise`` (the starts use the seed itself).
NOISE_KEY_SALT = 1


def _noise_arguments(args) -> dict:
    """`solve_flow`'s ``noise``, ``key`` and ``common_noise`` from the flags (none without ``--noise``)."""
    if args.noise is None:
        return {}
    import jax

    key = jax.random.fold_in(jax.random.key(args.seed), NOISE_KEY_SALT)
    return {"noise": args.noise, "key": key, "common_noise": args.common_noise}


def _warn_hit(args, hit: int) -> int:
    if hit:
        print(
            f"rankdyn flow: warning: the solver hit its step limit in {hit} of {args.batch} trajectories "
            "(their later values are NaN and excluded); loosen --rtol/--atol or use a larger --dt.",
            file=sys.stderr,
        )
    return 0


def _drift_words(field, sol) -> str:
    """The drift from the sphere, or why there is none (a scheme that moves the radius)."""
    if field.radial:
        return f"the radius moves under --placement {field.placement} (no projection, no drift)"
    return f"drift from the sphere {float(sol.drift):.2e}"


def sol_eps() -> float:
    """The diameter below which the tokens count as one cluster (`FlowObserver`'s default)."""
    from ..flow import FlowObserver

    return float(FlowObserver().eps)


def _lyapunov(args, field, x0) -> None:
    """``--lyapunov K``: the flow's top K exponents, QR at every saved interval (`rankdyn.lyapunov`)."""
    import jax

    from .._run._io import provenance, write_json
    from ..lyapunov import lyapunov_spectrum_flow
    from ..plotting import plot_lyapunov_convergence, plot_lyapunov_spectrum

    res = lyapunov_spectrum_flow(
        field,
        x0,
        args.time,
        beta=args.beta,
        k=args.lyapunov,
        intervals=args.saves - 1,
        solver=args.solver,
        rtol=args.rtol,
        atol=args.atol,
        dt=args.dt,
        key=jax.random.fold_in(jax.random.key(args.seed), 7),
        progress=not args.no_progress,
    )
    spectrum = res.to_dict()
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
    write_json(
        args.out / "lyapunov.json",
        {"config": config, "seed": args.seed, "spectrum": spectrum, "provenance": provenance()},
    )
    title = f"{args.dynamics.upper()} flow, {args.mask} mask, n={args.n}, d={args.d}, beta={args.beta:g}"
    plot_lyapunov_spectrum(spectrum, title=title, path=args.out / "spectrum.png")
    plot_lyapunov_convergence(spectrum, title=title, path=args.out / "convergence.png")
    top = ", ".join(f"{v:.4g}" for v in spectrum["exponents"]["mean"][:4])
    print(f"lyapunov: top exponents (mean, per unit time): {top}; {res.num_flagged} flagged")
