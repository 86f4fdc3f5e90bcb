"""``rankdyn basins``: basins of the layer map's attractors across a parameter, matched by class.

A thin wrapper of `rankdyn.theory.basins_across` on the family ``p -> layer`` of the model flags
(those of ``rankdyn equilibria``), ``--param`` moving from ``--from`` to ``--to`` in ``--steps``
values. At every value the same ``--starts`` inputs (drawn by ``--x0`` from ``--seed``) are run
``--horizon`` layers; each limit is labelled by its period and its token class
(`rankdyn.theory.token_class_label`: rank and coincidence pattern, canonical under the token
permutations of `rankdyn.equilibria.symmetry_group` and the sign flip), or "not settled".
Writes ``basins.nc`` (per-start statuses, periods, labels and attractors; per-value fractions with Wilson
95% intervals; the starts; the config, seed and provenance) and ``basins.png`` (stacked fractions).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from .._errors import UsageError
from ._checks import HelpFormatter, check_out_dir, say_compiling
from ._devices import add_devices_flag
from ._param_range import PARAM_CHOICES, check_param_range, parameter_family
from .simulate import add_model_flags

#: Fewest parameter values: a scan across a parameter has two ends.
MIN_STEPS = 2


def add_parser(sub) -> None:
    p = sub.add_parser(
        "basins",
        help="basin fractions of the attractors across a parameter (many starts, labelled limits)",
        description="Run many starts of the layer map at each of --steps values of one parameter, label each "
        "limit by its period and token class (rank and which tokens coincide, up to the mask's permutations "
        "and the sign), and report each attractor's basin fraction with a Wilson 95% interval. Writes "
        "basins.nc and basins.png.",
        formatter_class=HelpFormatter,
    )
    add_model_flags(p, one_map=True)
    p.set_defaults(n=2, d=2, value="bidiagonal", qk="zero", mask="causal")
    g = p.add_argument_group("basins")
    g.add_argument("--param", required=True, choices=PARAM_CHOICES, help="the parameter to move")
    g.add_argument("--from", dest="p_from", type=float, required=True, metavar="P0", help="first value")
    g.add_argument("--to", dest="p_to", type=float, required=True, metavar="P1", help="last value")
    g.add_argument("--steps", type=int, required=True, metavar="K", help="number of values, ends included")
    g.add_argument("--starts", type=int, default=1000, metavar="S", help="starts per value (drawn by --x0)")
    g.add_argument("--horizon", type=int, default=1000, metavar="T", help="layers before a limit is read")
    g.add_argument("--max-period", type=int, default=8, help="the longest cycle looked for")
    g.add_argument(
        "--settle-tol",
        type=float,
        default=None,
        help="max |x_(T+k) - x_T| for period k (default 1e-8 in float64, 2.3e-4 in float32)",
    )
    g.add_argument(
        "--class-tol",
        type=float,
        default=1e-3,
        help="relative tolerance of the rank and of two tokens being equal or opposite",
    )
    g.add_argument("--out", type=Path, default=Path("out/basins"), help="output folder")
    add_devices_flag(p, "The starts run on the first device.")
    p.set_defaults(func=run)


def _check(args):
    """Every flag before compute; returns the `ModelConfig` at ``--from``."""
    if args.per_layer_weights:
        raise UsageError("--per-layer-weights is not supported: a basin is of one map iterated.")
    config = check_param_range(args)
    if config.has_dropout:
        raise UsageError(
            "--dropout, --attn-dropout and --hidden-dropout must be 0: a stochastic map has no attractors "
            "to label."
        )
    if args.steps < MIN_STEPS:
        raise UsageError(f"--steps {args.steps}: expected an integer >= {MIN_STEPS} (values, ends included).")
    for name in ("starts", "horizon", "max_period"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} {getattr(args, name)}: expected an integer >= 1.")
    if args.settle_tol is not None and not (math.isfinite(args.settle_tol) and args.settle_tol > 0):
        raise UsageError(f"--settle-tol {args.settle_tol}: expected a finite number > 0.")
    if not (math.isfinite(args.class_tol) and 0 < args.class_tol < 1):
        raise UsageError(f"--class-tol {args.class_tol}: expected a number in (0, 1).")
    from .._theory._token_classes import MAX_CLASS_TOKENS

    if args.n > MAX_CLASS_TOKENS:
        raise UsageError(
            f"--n {args.n}: token classes are labelled for at most {MAX_CLASS_TOKENS} tokens; lower --n."
        )
    _check_memory(args)
    check_out_dir(args.out)
    return config


def _check_memory(args) -> None:
    """Every start at every value is one batch: states and attention scores, a few copies each.

    24 state-sized buffers per start: the peak RSS of ``--n 9 --d 64 --steps 4 --starts 19200``
    grew 3.4 GiB above that of 2400 starts, 23 states per start (8 were 2.4x low;
    tests/test_memory_estimates.py).
    """
    from .._run._memory import MemoryEstimate, check_memory

    item = 8 if args.x64 else 4
    batch = args.steps * args.starts
    parts = {
        "states": 24 * batch * args.n * args.d * item,
        "attention scores": 4 * batch * args.heads * args.n * args.n * item,
    }
    check_memory(
        MemoryEstimate(parts),
        fix="lower --starts or --steps (or --n, --d).",
        what=f"--steps {args.steps} --starts {args.starts} --n {args.n} --d {args.d}",
    )


def run(args) -> int:
    config = _check(args)

    import jax.numpy as jnp
    import numpy as np

    from .._equilibria._symmetry import symmetry_group
    from .._model._tokens import initial_tokens
    from .._observe._tolerances import scaled_tol
    from .._run._io import provenance
    from ..theory import basins_across, token_class_label, token_class_name

    name = args.param
    family, _, _, k_x0 = parameter_family(config, name, args.p_from, args.seed)
    dtype = jnp.asarray(0.0).dtype
    settle = scaled_tol(1e-8, dtype) if args.settle_tol is None else args.settle_tol
    group = symmetry_group(family(args.p_from))
    if not group.sign:  # the label reads relative signs only
        print(
            "rankdyn basins: this map does not commute with X -> -X, but a token class does not tell X "
            "from -X: their basins are counted together.",
            file=sys.stderr,
        )
    label = token_class_label(
        args.n,
        permutations=group.permutations,
        all_permutations=group.all_permutations,
        tol=args.class_tol,
    )
    x0 = np.asarray(initial_tokens(k_x0, args.x0 or "sphere", args.n, args.d, batch=args.starts))
    values = np.linspace(args.p_from, args.p_to, args.steps)
    print(
        f"{args.starts} starts at {args.steps} values of {name} in [{min(values):g}, {max(values):g}], "
        f"horizon {args.horizon}, settle tol {settle:.1e} ({np.dtype(dtype).name})"
    )
    say_compiling("basins", "the layer map's program")
    scan = basins_across(
        family, x0, values, horizon=args.horizon, max_period=args.max_period, settle_tol=settle, label=label
    )
    names = [_attractor_name(k, v, args.n, token_class_name) for k, v in scan.attractors]
    for i, nm in enumerate(names):
        f = scan.fractions[:, i]
        print(f"  {nm}: basin fraction {f.min():.3f} to {f.max():.3f} across {name}")
    print(f"  not settled: {scan.not_settled.min():.3f} to {scan.not_settled.max():.3f}")
    cfg = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
    cfg["settle_tol"] = settle
    args.out.mkdir(parents=True, exist_ok=True)
    _write_dataset(args.out / "basins.nc", scan, names, x0, cfg, args.seed, provenance(), group.sign)
    _plot(scan, names, args)
    print(f"wrote {args.out / 'basins.nc'}, basins.png")
    return 0


def _attractor_name(period: int, label: int, n: int, class_name) -> str:
    cycle = "fixed point" if period == 1 else f"period {period}"
    return f"{cycle}, {class_name(label, n)}"


def _write_dataset(path, scan, names, x0, cfg, seed, prov, sign) -> None:
    """``basins.nc``: the labelled dataset (xarray / netCDF, as ``sweep.nc``)."""
    import numpy as np
    import xarray as xr

    from .._run._io import atomic_path, to_jsonable
    from .._sweep._assemble import NETCDF_ENGINE

    pv, st, at = ("param", "start", "attractor")
    ds = xr.Dataset(
        {
            "status": ((pv, st), scan.status.astype(str)),
            "period": ((pv, st), scan.period.astype(np.int32)),
            "label": ((pv, st), scan.label.astype(np.int32)),
            "attractor_index": ((pv, st), scan.attractor.astype(np.int32)),
            "fraction": ((pv, at), scan.fractions),
            "ci95_low": ((pv, at), scan.lo),
            "ci95_high": ((pv, at), scan.hi),
            "not_settled": (pv, scan.not_settled),
            "attractor_period": (at, np.array([k for k, _ in scan.attractors], np.int32)),
            "attractor_label": (at, np.array([v for _, v in scan.attractors], np.int32)),
            "starts": ((st, "token", "dim"), x0),
        },
        coords={pv: scan.params, st: np.arange(x0.shape[0]), at: np.array(names, dtype=str)},
        attrs={
            "param": cfg["param"],
            "seed": int(seed),
            "horizon": int(scan.horizon),
            "config": json.dumps(to_jsonable(cfg)),
            "provenance": json.dumps(to_jsonable(prov)),
            "sign_symmetry": int(sign),
            "description": (
                "basins across a parameter (rankdyn basins): status is each start's RESULTS member "
                "(successful, not_settled or nonfinite); period, label and attractor_index (-1: none) "
                "describe the successful ones"
            ),
        },
    )
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine=NETCDF_ENGINE)


def _plot(scan, names, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .._run._io import savefig
    from ..plotting import plot_basins_across

    fig, ax = plt.subplots(figsize=(8, 4.8))
    plot_basins_across(
        scan,
        ax=ax,
        names=names,
        xlabel=args.param,
        title=f"mask={args.mask} value={args.value} qk={args.qk} n={args.n} d={args.d}: "
        f"{args.starts} starts, "
        f"horizon {args.horizon}",
    )
    fig.tight_layout()
    savefig(fig, args.out / "basins.png", dpi=120)
    plt.close(fig)
