"""``rankdyn equilibria``: the equilibria of one layer map, with rank and stability.

A thin wrapper of `rankdyn.equilibrium_census`: it picks the enumeration (exact for the paper's
system, token-by-token tree search for other acyclic masks, joint search otherwise), prints
which one, and matches closed forms when the model is the paper's construction (App. F.1,
`docs/theory.md#constructions`).
Writes ``equilibria.json`` and ``eigen_moduli.png``.
"""

from __future__ import annotations

from pathlib import Path

from .._errors import UsageError
from ._checks import (
    HelpFormatter,
    check_band,
    check_nonnegative,
    check_out_dir,
    check_positive,
    say_compiling,
)
from ._devices import add_devices_flag
from ._seed_use import refuse_unread_seed
from .simulate import add_model_flags, check_model_args


def add_parser(sub) -> None:
    p = sub.add_parser(
        "equilibria",
        help="find equilibria of every rank and classify their stability",
        description="Fixed points F(X) = X of one layer: exact for the paper's system (causal, uniform "
        "attention, bidiagonal W_V), token-by-token tree search for acyclic masks, joint batched search "
        "(Gauss-Newton, deflation) otherwise; classes modulo symmetry with rank, stability and closed-form "
        "matching. Writes equilibria.json and eigen_moduli.png.",
        formatter_class=HelpFormatter,
    )
    add_model_flags(p, one_map=True)
    # --w is unset by default (refused with a value family that ignores it): 7.0 where it is read.
    # --seed unset is told apart from --seed 0: a seed that nothing reads is refused (`refuse_unread_seed`).
    p.set_defaults(n=6, d=6, value="bidiagonal", qk="zero", mask="causal", seed=None)
    g = p.add_argument_group("search")
    g.add_argument(
        "--search",
        choices=("auto", "exact", "tree-search", "joint-search"),
        default="auto",
        help="enumeration: exact (paper's system), tree-search (acyclic masks), joint-search; "
        "auto picks the most complete one that applies",
    )
    g.add_argument(
        "--tree-starts",
        type=int,
        default=None,
        help="tree search: starts per partial equilibrium and round (default 256)",
    )
    g.add_argument(
        "--joint-coverage",
        action="store_true",
        help="with the exact census, also run the joint search and report how many classes it finds",
    )
    g.add_argument(
        "--starts", type=int, default=None, help="random sphere starts in the first round (default 4096)"
    )
    g.add_argument("--chunk", type=int, default=None, help="starts per compiled batch (default 1024)")
    g.add_argument(
        "--method",
        choices=("gn", "lm"),
        default=None,
        help="Gauss-Newton (SVD) or Levenberg-Marquardt (default gn)",
    )
    g.add_argument("--max-steps", type=int, default=None, help="Newton/LM steps per start (default 100)")
    g.add_argument(
        "--short-steps",
        type=int,
        default=None,
        help="first Newton budget; only unconverged starts continue to --max-steps (0: off; default 25)",
    )
    g.add_argument(
        "--forward-steps", type=int, default=None, help="forward iterations before the solve (default 0)"
    )
    g.add_argument(
        "--minimise-steps",
        type=int,
        default=None,
        help="Adam steps on ||F(X)-X||^2 before the solve (default 0)",
    )
    g.add_argument("--learning-rate", type=float, default=None, help="Adam learning rate (default 0.01)")
    g.add_argument(
        "--deflation-rounds",
        type=int,
        default=None,
        help="rounds that deflate all equilibria found so far (default 2)",
    )
    g.add_argument(
        "--deflation-starts", type=int, default=None, help="starts per deflation round (default --starts / 4)"
    )
    g.add_argument(
        "--target-ranks",
        type=str,
        default=None,
        help="comma-separated ranks (or 'all') for extra rank-biased rounds (Adam + rank penalty)",
    )
    g.add_argument(
        "--target-starts", type=int, default=None, help="starts per rank-biased round (default 512)"
    )
    g.add_argument(
        "--residual-tol",
        type=float,
        default=None,
        help="success threshold of the searches (default 1e-10 f64 / 1e-5 f32)",
    )
    g.add_argument(
        "--rank-tol",
        type=float,
        default=None,
        help="relative singular value tolerance of the rank (default 1e-8 in float64, 2.3e-4 in float32)",
    )
    g.add_argument(
        "--dedup-tol",
        type=float,
        default=None,
        help="joint search: max-abs distance under which two equilibria are one (default 0.02)",
    )
    # Default 1e-6 for exact / token-polished points; 1e-2 for unpolished joint-search points, whose
    # first token (a root of multiplicity d - 1) is only ~1e-3 accurate, so 1 reads as 1 - O(w 1e-3).
    g.add_argument(
        "--stability-tol",
        type=float,
        default=None,
        help="tolerance on |lambda| - 1 (marginal band); default 1e-6, 1e-2 for the joint search",
    )
    g.add_argument("--out", type=Path, default=Path("out/equilibria"), help="output folder")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_devices_flag(
        p,
        "The search runs on the first device, whose batched LAPACK calls (SVD, least squares) "
        "already spread over every core of XLA's thread pool.",
    )
    p.set_defaults(func=run)


#: Search flags (argparse dest) -> default; they are None on the command line, so that a flag
#: given to a search that does not read it is refused (`_refuse_unread`).
_SEARCH_DEFAULTS = {
    "starts": 4096,
    "chunk": 1024,
    "method": "gn",
    "max_steps": 100,
    "short_steps": 25,
    "forward_steps": 0,
    "minimise_steps": 0,
    "learning_rate": 1e-2,
    "deflation_rounds": 2,
    "deflation_starts": None,
    "target_ranks": "",
    "target_starts": 512,
    "dedup_tol": 2e-2,
    "tree_starts": 256,
    "residual_tol": None,
}
#: The flags each enumeration reads (``--rank-tol`` and ``--stability-tol``: all of them).
_JOINT_FLAGS = tuple(k for k in _SEARCH_DEFAULTS if k not in ("tree_starts", "residual_tol")) + (
    "residual_tol",
)
_READS = {
    "exact": (),
    "tree-search": ("tree_starts", "residual_tol"),
    "joint-search": _JOINT_FLAGS,
}
#: The value of --w where the value family reads it and the flag is not given.
W_DEFAULT = 7.0


def _opt(args, dest):
    """A search flag's value, its default when not given."""
    v = getattr(args, dest)
    return _SEARCH_DEFAULTS[dest] if v is None else v


def _check(args):
    """Every flag, the memory estimate and the output folder, before any compute; the model's
    `ModelConfig` is returned."""
    if args.per_layer_weights:
        raise UsageError("--per-layer-weights is not supported: an equilibrium is a fixed point of one map.")
    if args.x0 is not None:
        raise UsageError(
            f"--x0 {args.x0} is ignored by rankdyn equilibria (the searches draw their own starts on the "
            "sphere); drop it."
        )
    if args.w is None and args.value in ("bidiagonal", "jordan"):
        args.w = W_DEFAULT
    args.seed_given = args.seed is not None
    args.seed = 0 if args.seed is None else args.seed
    config = check_model_args(args)
    if config.has_dropout:
        raise UsageError(
            "--dropout, --attn-dropout and --hidden-dropout must be 0: a stochastic map has no fixed points."
        )
    if _opt(args, "starts") < 1 or _opt(args, "chunk") < 1:
        raise UsageError(
            f"--starts and --chunk must be >= 1, got {_opt(args, 'starts')} and {_opt(args, 'chunk')}."
        )
    counts = ("deflation_rounds", "max_steps", "short_steps", "forward_steps", "minimise_steps")
    if min(_opt(args, k) for k in counts) < 0:
        raise UsageError(
            "--deflation-rounds, --max-steps, --short-steps, --forward-steps and --minimise-steps "
            "must be >= 0."
        )
    check_nonnegative(args, "deflation_starts", "target_starts", "tree_starts", minimum=1)
    check_positive(args, "residual_tol", "rank_tol", "dedup_tol", "learning_rate")
    check_band(args, "stability_tol")
    _check_memory(args)
    check_out_dir(args.out)
    return config


def _refuse_unread(args, how: str) -> None:
    """Refuse the search flags that the enumeration ``how`` would ignore (one rule: refused, not ignored)."""
    reads = set(_READS[how]) | (set(_JOINT_FLAGS) if how == "exact" and args.joint_coverage else set())
    for dest in _SEARCH_DEFAULTS:
        if getattr(args, dest) is not None and dest not in reads:
            flag = "--" + dest.replace("_", "-")
            raise UsageError(
                f"{flag} is ignored by the {how} enumeration (--search {args.search} chose it); drop it"
                + (" or add --joint-coverage." if how == "exact" and dest in _JOINT_FLAGS else ".")
            )
    if args.joint_coverage and how != "exact":
        raise UsageError(
            f"--joint-coverage compares the joint search with the exact census, which does not run here "
            f"(the {how} enumeration does); drop it."
        )


def _check_memory(args) -> None:
    from .._run._memory import available_memory, check_memory, equilibria_memory, format_bytes

    item = 8 if args.x64 else 4
    chunk = min(_opt(args, "chunk"), _opt(args, "starts"))
    est = equilibria_memory(n=args.n, d=args.d, chunk=chunk, itemsize=item)
    avail = available_memory()
    per_start = equilibria_memory(n=args.n, d=args.d, chunk=1, itemsize=item).total
    fits = 0 if avail[0] is None else avail[0] // per_start
    fix = (
        f"lower --chunk to {fits} or fewer (each start of a chunk needs {format_bytes(per_start)})."
        if fits
        else "lower --n or --d: one start alone does not fit."
    )
    check_memory(est, fix=fix, what=f"--n {args.n} --d {args.d} --chunk {chunk}", available=avail)


def _target_ranks(spec: str, n: int, d: int) -> list[int]:
    if not spec:
        return []
    if spec == "all":
        return list(range(1, min(n, d) + 1))
    try:
        ks = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--target-ranks must be 'all' or comma-separated integers, got {spec!r}.") from None
    bad = [k for k in ks if not 1 <= k <= min(n, d)]
    if bad:
        raise UsageError(f"--target-ranks {bad} outside [1, min(n, d) = {min(n, d)}].")
    return ks


def _is_paper_construction(args, layer) -> bool:
    import numpy as np

    return (
        args.mask == "causal"
        and args.value == "bidiagonal"
        and args.qk == "zero"
        and args.placement == "post"
        and args.ln == "sphere"
        and args.heads == 1
        and not args.skip
        and not args.mlp
        and np.allclose(np.asarray(layer.weights.w_q), 0)
        and args.n <= args.d
    )


def run(args) -> int:
    config = _check(args)  # first: a refused command answers before JAX loads
    import jax.random as jr
    import numpy as np

    from .._equilibria._census import census_method
    from .._run._io import provenance, write_json
    from .._theory._constructions import all_closed_form_equilibria
    from ..equilibria import JointOptions, equilibrium_census
    from .simulate import layer_from_args

    k_layer, k_x0 = jr.split(jr.key(args.seed))
    layer = layer_from_args(args, k_layer, config)
    try:  # refuse a --search that does not apply, before compute
        how = census_method(layer, args.search)
    except ValueError as err:
        raise UsageError(f"--search {args.search}: {err}") from None
    _refuse_unread(args, how)
    if args.seed_given:
        refuse_unread_seed(lambda key: layer_from_args(args, key, config), how != "exact")
    print(
        f"method: {how}"
        + {
            "exact": " (token-by-token polynomial roots: complete)",
            "tree-search": " (token by token, multi-start + deflation; saturation reported)",
            "joint-search": " (all tokens jointly, random starts + deflation)",
        }[how]
    )
    # Closed forms of the paper's App. F.1 (only for the paper's construction), to match against.
    closed = []
    if _is_paper_construction(args, layer):
        closed = [(k, np.asarray(x)) for k, x in all_closed_form_equilibria(args.n, args.d, args.w)]
    search = {k: _opt(args, k) for k in _SEARCH_DEFAULTS}
    search["target_ranks"] = _target_ranks(search["target_ranks"], args.n, args.d)
    say_compiling("equilibria", "the census's programs")
    census = equilibrium_census(
        layer,
        k_x0,
        search=args.search,
        joint_coverage=args.joint_coverage,
        rank_tol=args.rank_tol,
        stability_tol=args.stability_tol,
        closed_forms=closed,
        progress=not args.no_progress,
        tree_starts=search.pop("tree_starts"),
        residual_tol=search.pop("residual_tol"),
        joint=JointOptions(**search),
    )
    config = {k: v for k, v in vars(args).items() if k not in ("func", "seed_given")}
    config |= {k: _opt(args, k) for k in _SEARCH_DEFAULTS}  # the values used, as saved before 0.3
    config["out"] = str(args.out)
    result = {"config": config, **census.to_dict(), "provenance": provenance()}
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "equilibria.json", result)
    _plot(census.equilibria, args)
    _print_summary(census, args)
    return 0


def _plot(records, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._run._io import savefig
    from ..plotting import plot_equilibria_moduli_grid

    # A panel per rank at a printable size, however many equilibria the census found.
    fig = plot_equilibria_moduli_grid(
        [e.moduli for e in records],
        [e.rank for e in records],
        closed_form=[e.closed_form_match is not False for e in records],
        title=f"{len(records)} classes of equilibria (modulo sign): mask={args.mask} value={args.value} "
        f"w={args.w} n={args.n} "
        f"d={args.d}",
    )
    savefig(fig, args.out / "eigen_moduli.png", dpi=120)
    plt.close(fig)


def _print_summary(census, args) -> None:
    records, closed = census.equilibria, census.closed_forms
    if census.status_counts:
        print(f"status over all starts: {census.status_counts}")
    comp = census.completeness
    if comp["kind"] == "exact":
        print(f"completeness: exact ({comp['members']} equilibria = {len(records)} classes modulo sign)")
    elif "per_token" in comp:
        print(
            "completeness: saturation, new solutions per round by token: "
            + "; ".join(
                f"token {s['token']}: {[r['new_solutions'] for r in s['rounds']] or 'exact'}"
                for s in comp["per_token"]
            )
        )
    else:
        print(f"completeness: saturation, new classes per round: {comp['new_classes_per_round']}")
    print(
        "counts are modulo symmetry (sign flip"
        + (
            ", token permutations"
            if census.symmetries["all_permutations"] or len(census.symmetries["permutations"]) > 1
            else ""
        )
        + ")"
    )
    print("rank  classes  closed-form  stable  marginal  unstable  max residual  max error est.")
    for k, cnt in census.by_rank.items():
        rs = [e for e in records if e.rank == int(k)]
        cf = sum(bool(e.closed_form_match) for e in rs)
        cls = [census.by_rank_and_class[k][c] for c in ("stable", "marginal", "unstable")]
        mr = max((e.residual for e in rs), default=float("nan"))
        me = max((e.error_estimate for e in rs), default=float("nan"))
        print(f"{k:>4}  {cnt:>7}  {cf:>11}  {cls[0]:>6}  {cls[1]:>8}  {cls[2]:>8}  {mr:12.2e}  {me:14.2e}")
    if closed:
        print(
            f"closed forms found (classes): {closed['found']} / {closed['total']} "
            + " ".join(f"k={k}:{v['found']}/{v['total']}" for k, v in closed["by_rank"].items())
        )
    cov = census.coverage
    if cov:
        print(
            f"joint-search coverage: {cov['found']} / {cov['exact_classes']} exact classes "
            f"({100 * cov['fraction']:.0f}%) from {cov['starts']} starts in {cov['seconds']:.1f}s; by rank "
            + " ".join(f"k={k}:{v['found']}/{v['total']}" for k, v in cov["found_by_rank"].items())
        )
    t = census.timing
    print(
        f"search {t['search_s']:.1f}s (compile {t['compile_s']:.1f}s), stability {t['stability_s']:.1f}s; "
        f"wrote {args.out / 'equilibria.json'}"
    )
