"""``rankdyn continue``: branches of equilibria across a layer parameter, with their bifurcations.

A thin wrapper of `rankdyn._equilibria.continue_branch`: the model flags are those of
``rankdyn equilibria`` (imported from `rankdyn._commands.simulate`); ``--param`` names the
parameter that moves from ``--from`` to ``--to``. With ``--start census`` (the default) the
census of ``rankdyn equilibria`` runs at ``--from`` and every class found is continued; with
``--start FILE.npy`` the equilibria in the file are. Writes ``branches.json`` (every branch's
points, multipliers, stability and bifurcations, with the config, seed and provenance) and
``bifurcation.png``. It always computes in float64: float32 cannot resolve the test functions
near a bifurcation (folds "located" outside their own bracket), so ``--x64`` is refused as
redundant. (The module cannot be named ``continue``, a Python keyword.)
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from .._errors import UsageError
from ._checks import HelpFormatter, check_band, check_out_dir, check_positive, say_compiling
from ._devices import add_devices_flag
from ._param_range import PARAM_CHOICES, check_param2, check_param_range, parameter_family
from ._seed_use import refuse_unread_seed
from .simulate import add_model_flags


def add_parser(sub) -> None:
    p = sub.add_parser(
        "continue",
        help="follow equilibria across a parameter (pseudo-arclength) and locate bifurcations",
        description="Pseudo-arclength continuation of equilibria F_p(X) = X in one layer parameter, through "
        "folds, with fold / branch-point / period-doubling / Neimark-Sacker detection and location. Starts "
        "from the census at --from (default) or from equilibria in a .npy file. Writes branches.json and "
        "bifurcation.png.",
        formatter_class=HelpFormatter,
    )
    add_model_flags(p, one_map=True)
    for action in p._actions:
        if action.dest == "x64":
            action.help = "refused: rankdyn continue always computes in float64"
    # --seed unset is told apart from --seed 0: a seed that nothing reads is refused (`_check_seed_read`).
    p.set_defaults(n=6, d=6, value="bidiagonal", qk="zero", mask="causal", seed=None, before_jax=_float64)
    g = p.add_argument_group("continuation")
    g.add_argument("--param", required=True, choices=PARAM_CHOICES, help="the parameter to move")
    g.add_argument("--from", dest="p_from", type=float, required=True, metavar="P0", help="start value")
    g.add_argument("--to", dest="p_to", type=float, required=True, metavar="P1", help="end value")
    g.add_argument(
        "--start",
        default="census",
        help="'census' (every class of the census at --from) or a .npy file of equilibria (n, d) / (m, n, d)",
    )
    g.add_argument(
        "--period",
        type=int,
        default=1,
        metavar="K",
        help="follow fixed points of the K-th iterate F^K (cycles of period K; shared weights)",
    )
    g.add_argument(
        "--param2",
        default=None,
        choices=PARAM_CHOICES,
        help="a second parameter: follow each located fold, period doubling and Neimark-Sacker point in "
        "(--param, --param2) from --from2 to --to2 (writes curves.png); branches are continued at --from2",
    )
    g.add_argument("--from2", dest="q_from", type=float, default=None, metavar="Q0", help="start of --param2")
    g.add_argument("--to2", dest="q_to", type=float, default=None, metavar="Q1", help="end of --param2")
    g.add_argument("--ds", type=float, default=None, help="first arclength step (default |P1 - P0| / 50)")
    g.add_argument("--max-steps", type=int, default=400, help="continuation steps per branch")
    g.add_argument("--residual-tol", type=float, default=None, help="corrector tolerance (default 1e-10)")
    g.add_argument("--stability-tol", type=float, default=1e-6, help="tolerance on |lambda| - 1")
    g.add_argument(
        "--measure",
        choices=("projection", "sigma_min", "min_cos"),
        default="projection",
        help="y axis of bifurcation.png: <X, U> for a fixed random U (separates the sheets of a fold), or "
        "the smallest singular value, or the smallest cosine between tokens",
    )
    g.add_argument("--out", type=Path, default=Path("out/continue"), help="output folder")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    add_devices_flag(p, "The continuation runs on the first device.")
    p.set_defaults(func=run)


def _float64(args) -> None:
    """Float64 before JAX starts (read from ``JAX_ENABLE_X64`` at import), or now if it is loaded."""
    import os

    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_enable_x64", True)
    else:
        os.environ["JAX_ENABLE_X64"] = "1"


def _check(args):
    """Every flag and the ``--start`` file before JAX loads; returns the `ModelConfig` at ``--from``.

    ``args.seed_given`` records whether ``--seed`` was given (its use is checked on the built layer)."""
    if args.x64:
        raise UsageError(
            "--x64 is not needed: rankdyn continue always computes in float64 (float32 cannot resolve the "
            "test functions near a bifurcation); drop it."
        )
    if args.period < 1:
        raise UsageError(f"--period {args.period}: expected an integer >= 1 (the length of the cycle).")
    if args.per_layer_weights:
        raise UsageError("--per-layer-weights is not supported: an equilibrium is a fixed point of one map.")
    if args.x0 is not None:
        raise UsageError(
            f"--x0 {args.x0} is ignored by rankdyn continue (the starts are equilibria); drop it."
        )
    args.seed_given = args.seed is not None
    args.seed = 0 if args.seed is None else args.seed
    check_param2(args)  # first: the branches are continued at --from2
    config = check_param_range(args)
    _check_steps(args)
    if config.has_dropout:
        raise UsageError(
            "--dropout, --attn-dropout and --hidden-dropout must be 0: a stochastic map has no fixed points."
        )
    check_positive(args, "residual_tol")
    check_band(args, "stability_tol")
    from .._equilibria import MAX_STATE

    if args.n * args.d > MAX_STATE:
        raise UsageError(
            f"--n {args.n} --d {args.d}: n * d = {args.n * args.d} is above {MAX_STATE} (dense (n d)^2 "
            "Jacobians at every corrector step); lower --n or --d."
        )
    check_out_dir(args.out)
    if args.start != "census":
        args.start_array = _file_starts(args.start, args.n, args.d)  # NumPy only: before JAX loads
    return config


def _check_steps(args) -> None:
    """``--from``, ``--to``, ``--ds`` and ``--max-steps`` by `continue_branch`'s own rules (its
    `ContinuationPlan`), before the census and JAX (``--from 1 --to 1.0000000000000002`` ran the
    census, then said ``w=nan``)."""
    from ..plans import ContinuationPlan

    ContinuationPlan(args.p_from, args.p_to, args.ds, max_steps=args.max_steps, param=args.param, flags=True)


def _file_starts(path: str, n: int, d: int):
    import numpy as np

    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--start {path} is a folder; give a .npy file of equilibria (or 'census').")
    if p.suffix != ".npy":
        raise UsageError(f"--start {path}: expected 'census' or a .npy file of equilibria.")
    if not p.is_file():
        raise UsageError(f"--start {path}: no such file.")
    try:
        x = np.load(p, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise UsageError(f"--start {path}: cannot read it as a .npy array ({err}).") from None
    shape = x.shape  # the file's shape, not the one-equilibrium batch made of it
    x = x[None] if x.ndim == 2 else x
    if x.ndim != 3 or x.shape[1:] != (n, d) or x.shape[0] == 0:
        raise UsageError(
            f"--start {path}: expected equilibria of shape (n, d) = ({n}, {d}) or (m, {n}, {d}), got {shape}."
        )
    if not np.all(np.isfinite(x)):
        raise UsageError(f"--start {path}: the array has non-finite entries (NaN or inf).")
    return x.astype(float)


def _check_seed_read(config, name: str, p: float, census: bool) -> None:
    """Refuse a given ``--seed`` that changes nothing (`refuse_unread_seed`): the layer at ``--from``
    is the same from any key and no census draws random starts."""
    import jax.random as jr

    from .._equilibria._census import census_method
    from .._model._build import build_layer

    cfg = dataclasses.replace(config, **{name: float(p)})
    build = lambda key: build_layer(key, cfg)  # noqa: E731
    refuse_unread_seed(build, census and census_method(build(jr.key(0))) != "exact", census)


def run(args) -> int:
    config = _check(args)  # every refusal above JAX: it is imported only now

    import numpy as np

    from .._equilibria._arclength import check_start
    from .._run._io import provenance, write_json
    from ..equilibria import continue_branch, equilibrium_census

    name = args.param
    if args.seed_given:
        _check_seed_read(config, name, args.p_from, args.start == "census")
    family, fam, k_layer, k_x0 = parameter_family(config, name, args.p_from, args.seed)
    if args.start != "census":
        starts = args.start_array
        for i, x in enumerate(starts):
            try:
                check_start(fam, x, args.p_from, args.residual_tol)
            except UsageError as err:
                raise UsageError(f"--start {args.start}[{i}]: {err}") from None
        source = str(args.start)
    say_compiling("continue", "the continuation's programs")
    if args.start == "census":
        from .._equilibria._census_cost import START_SEARCH_BUDGET_S, SearchTooLong

        try:  # the start search is estimated before it runs, and again before each token
            census = equilibrium_census(
                family(args.p_from),
                k_x0,
                progress=not args.no_progress,
                max_seconds=START_SEARCH_BUDGET_S,
                log=lambda line: print(line, file=sys.stderr, flush=True),
            )
        except SearchTooLong as err:
            raise UsageError(
                f"--start census: {err}. Give the starts with --start FILE.npy (equilibria of shape "
                "(n, d) or (m, n, d)), or lower --n/--d."
            ) from None
        if not census.equilibria:  # e.g. a gaussian W_V with no real eigenvalue under a causal mask
            raise UsageError(
                f"the census found no equilibrium of the layer at --param {name} = {args.p_from:g} "
                f"({census.method}), so there is no branch to start; try another --seed or --from, or give "
                "starts with --start FILE."
            )
        starts = np.stack([np.asarray(e.tokens, dtype=float) for e in census.equilibria])
        source = f"census at {name} = {args.p_from:g} ({census.method}, {len(starts)} classes)"
    print(
        f"continuing {len(starts)} branch(es) in {name} from {args.p_from:g} to {args.p_to:g}; "
        f"starts: {source}"
    )
    branches = []
    for i, x in enumerate(starts):
        print(
            f"branch {i + 1}/{len(starts)} (rank {int(np.linalg.matrix_rank(x, tol=1e-8))})", file=sys.stderr
        )
        br = continue_branch(
            family,
            x,
            args.p_from,
            args.p_to,
            ds=args.ds,
            max_steps=args.max_steps,
            residual_tol=args.residual_tol,
            stability_tol=args.stability_tol,
            param_name=name,
            period=args.period,
            progress=not args.no_progress,
            throw=False,
        )  # fmt: skip  (a branch that ends early is reported with its status)
        branches.append(br)
        # An unlocated bifurcation is known only to its bracket: printed as one, never as a point.
        kinds = ", ".join(b.describe(name) for b in br.bifurcations) or "no bifurcation"
        print(
            f"  {len(br)} points, {name} in [{br.params.min():.6g}, {br.params.max():.6g}], {kinds}; "
            f"{br.status}"
        )
        if br.status == "max_steps_reached":
            print(
                f"rankdyn continue: branch {i + 1} stopped at --max-steps {args.max_steps} ({name} = "
                f"{br.params[-1]:.6g}) before leaving [{min(args.p_from, args.p_to):g}, "
                f"{max(args.p_from, args.p_to):g}]; raise --max-steps or --ds to follow it further.",
                file=sys.stderr,
            )
        elif br.status != "parameter_end":
            print(
                f"rankdyn continue: branch {i + 1} ended early ({br.status}): {br.message}", file=sys.stderr
            )
    curves = _curves(branches, config, k_layer, args) if args.param2 else []
    cfg = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k not in ("func", "before_jax", "start_array", "seed_given")
    }
    result = {
        "config": cfg,
        "seed": args.seed,
        "param": name,
        "from": args.p_from,
        "to": args.p_to,
        "starts": source,
        "branches": [br.to_dict() for br in branches],
        "curves": [dict(c.to_dict(), branch=i, bifurcation=j) for i, j, c in curves],
        "provenance": provenance(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "branches.json", result)
    _plot(branches, args)
    figures = "bifurcation.png"
    if args.param2:
        _plot_curves(curves, args)
        figures += " and curves.png"
    print(f"wrote {args.out / 'branches.json'}, {figures}")
    return 0


def _curves(branches, config, key, args):
    """Each located fold, period doubling and Neimark-Sacker point followed in (--param, --param2)."""
    from .._model._build import build_layer
    from ..equilibria import continue_curve

    name, name2 = args.param, args.param2

    def family2(v, w):
        return build_layer(key, dataclasses.replace(config, **{name: float(v), name2: float(w)}))

    out = []
    for i, br in enumerate(branches):
        for j, bif in enumerate(br.bifurcations):
            if bif.kind not in ("fold", "period-doubling", "neimark-sacker"):
                continue
            if not bif.located:
                print(f"  {bif.describe(name)}: no curve (a curve starts from a located point)")
                continue
            try:
                c = continue_curve(
                    family2, bif, args.q_from, args.q_to, param_name=name, param2_name=name2, throw=False
                )
            except UsageError as err:
                print(f"  {bif.kind} of branch {i + 1} at {name} = {bif.param:.10g}: no curve ({err})")
                continue
            out.append((i, j, c))
            print(
                f"  {c.kind} curve from branch {i + 1}: {len(c)} points, {name2} in [{c.q.min():.6g}, "
                f"{c.q.max():.6g}], {name} in [{c.p.min():.6g}, {c.p.max():.6g}]"
                + "".join(f", {sp.kind} at ({sp.p:.10g}, {sp.q:.10g})" for sp in c.special_points)
                + f"; {c.status}"
            )
    return out


def _plot_curves(curves, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._run._io import savefig

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    for i, j, c in curves:
        ax.plot(c.p, c.q, label=f"{c.kind} (branch {i + 1})")
        for pc, qc in c.cusps:
            ax.plot([pc], [qc], "k*", ms=9)
    ax.set_xlabel(args.param)
    ax.set_ylabel(args.param2)
    ax.set_title(f"bifurcation curves in ({args.param}, {args.param2})", fontsize=9)
    if curves:
        ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    savefig(fig, args.out / "curves.png", dpi=120)
    plt.close(fig)


def _plot(branches, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._run._io import savefig
    from ..plotting import plot_bifurcation

    fig, ax = plt.subplots(figsize=(8, 4.8))
    plot_bifurcation(
        branches,
        ax=ax,
        measure=args.measure,
        title=f"mask={args.mask} value={args.value} qk={args.qk} n={args.n} d={args.d}: "
        f"{len(branches)} branches",
    )
    fig.tight_layout()
    savefig(fig, args.out / "bifurcation.png", dpi=120)
    plt.close(fig)
