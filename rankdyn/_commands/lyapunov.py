"""``rankdyn lyapunov``: the Lyapunov spectrum of the layer map over a batch of trajectories.

``rankdyn lyapunov <model flags as simulate> [--checkpoint ...] --num-layers T [--k K] [--discard D]
[--qr-every Q] --batch B --out DIR`` writes ``lyapunov.json`` (the exponents' batch statistics,
the running estimates, every trajectory's exponents with ``--per-trajectory``, flags, config,
seed and provenance), ``spectrum.png`` and ``convergence.png``. The model and checkpoint flags
and their checks are those of ``rankdyn simulate`` (`rankdyn._commands.simulate`,
`rankdyn._commands._checkpoint`).
"""

from __future__ import annotations

import math
from pathlib import Path

from .._errors import UsageError
from ._checkpoint import add_checkpoint_flags, checkpoint_requested
from ._checks import check_nonnegative, check_out_dir, say_compiling
from ._devices import add_devices_flag, sharding_devices
from ._table import LineHelpFormatter
from .simulate import add_model_flags, check_model_args, layer_from_args

#: Exponents computed by default (the top ones): the full n(d-1) of `small` is 2016.
DEFAULT_K = 16


def add_parser(sub) -> None:
    p = sub.add_parser(
        "lyapunov",
        help="Lyapunov spectrum of the layer map (QR method, batched)",
        description="Lyapunov spectrum of the masked attention + LN map along a batch of trajectories "
        "(QR / Benettin method with jax.linearize; tangent space of the spheres with post sphere-LN, R^(nd) "
        "otherwise): lyapunov.json, spectrum.png, convergence.png.",
        formatter_class=LineHelpFormatter,
    )
    add_model_flags(p)
    p.add_argument(
        "--num-layers", type=int, default=128, help="depth T (a multiple of an integer --qr-every)"
    )
    p.add_argument("--batch", type=int, default=16, help="number of trajectories")
    p.add_argument(
        "--k",
        type=int,
        default=None,
        help=f"exponents computed, 1..n(d-1) or 1..nd (default: min({DEFAULT_K}, dim))",
    )
    p.add_argument(
        "--discard", type=int, default=0, help="layers before the averaging starts (< --num-layers)"
    )
    p.add_argument(
        "--qr-every",
        default="auto",
        help="layers between QR re-orthonormalisations: an integer >= 1, or auto (1 to 8, from the "
        "spread of the exponents)",
    )
    p.add_argument("--per-trajectory", action="store_true", help="also write every trajectory's exponents")
    p.add_argument("--chunk", type=int, default=None, help="trajectories advanced together")
    p.add_argument("--out", type=Path, default=Path("out/lyapunov"), help="output folder")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_devices_flag(p, "Whole chunks of trajectories run side by side, one per device.")
    add_checkpoint_flags(p)
    p.set_defaults(func=run)


def lyapunov_plan(args, layers: int | None, dim: int | None):
    """The run's `LyapunovPlan` from the flags (its checks name them; no JAX): ``layers=None``
    (a checkpoint's own depth, not read yet) or ``dim=None`` (no model yet) leave the checks
    against them to the plan built once they are known. An integer ``--qr-every`` is converted
    in place."""
    from ..plans import LyapunovPlan

    if dim == 0:  # --d 1 on the spheres S^0: the default --k would be 0, a misleading cause
        raise UsageError(
            f"--d {args.d}: the tokens live on the spheres S^0 (post sphere LayerNorm), whose tangent "
            "space has dimension n(d-1) = 0: there is no spectrum to compute; use --d 2 or more."
        )
    plan = LyapunovPlan(
        layers,
        dim,
        args.k,
        args.discard,
        args.qr_every,
        args.chunk,
        default_k=DEFAULT_K,
        what="num_layers",
        flags=True,
    )
    args.qr_every = plan.qr_every
    return plan


def check_spectrum_args(args, dim: int, layers: int) -> int:
    """The spectrum flags against the state space's dimension; returns k. UsageError names the flag."""
    return lyapunov_plan(args, layers, dim).exponents


def _config_dim(args, config) -> int:
    """An upper bound of the state space's dimension from the flags, before JAX loads: n d, or 0
    for ``--d 1`` on the spheres S^0 (post or ngpt, --ln sphere: n(d-1)); the built layer's
    (`rankdyn._lyapunov._layer.spectrum_dim`) decides in the end."""
    resolved = config.resolved()
    on_spheres = resolved["placement"] in ("post", "ngpt") and resolved["ln"] == "sphere"
    return 0 if on_spheres and args.d == 1 else args.n * args.d


def _model(args):
    """``(layer, x0, layers, k, extra result fields, title)`` for a random model or a checkpoint."""
    if checkpoint_requested(args):
        return _checkpoint_model(args)
    config = check_model_args(args)
    check_nonnegative(args, "num_layers", "batch", minimum=1)
    if config.has_dropout:
        raise UsageError(
            "--dropout: a layer with dropout is a random map; its spectrum is not computed here."
        )
    plan = lyapunov_plan(args, args.num_layers, _config_dim(args, config))  # before JAX loads
    check_out_dir(args.out)
    import jax.random as jr

    from .._model._tokens import initial_tokens
    from ..lyapunov import spectrum_dim

    k_layer, k_x0, _ = jr.split(jr.key(args.seed), 3)
    layer = layer_from_args(args, k_layer, config)
    if spectrum_dim(layer) != plan.dim:  # the built layer decides: n(d-1) on the spheres
        plan = lyapunov_plan(args, args.num_layers, spectrum_dim(layer))
    k = plan.exponents
    _check_memory_before_drawing(args, k)
    x0 = initial_tokens(k_x0, args.x0, args.n, args.d, args.batch)
    title = f"mask={args.mask} placement={args.placement} value={args.value} n={args.n} d={args.d}"
    return layer, x0, args.num_layers, k, {}, title


def memory_estimate(args, k: int):
    """The `rankdyn._run._memory.MemoryEstimate` of a random-model run (the starting tokens, the
    chunk's tangent working set, the exponents): its plan's (`LyapunovPlan.memory`, what
    ``lyapunov_spectrum`` checks); tests/test_lyapunov_memory.py checks it against the peak RSS."""
    import jax
    import jax.numpy as jnp

    from .._lyapunov._budget import TOKEN_COPIES
    from ..plans import LyapunovPlan

    itemsize = jnp.dtype(jax.dtypes.canonicalize_dtype(jnp.float64)).itemsize
    plan = LyapunovPlan(
        args.num_layers, None, k, args.discard, args.qr_every, args.chunk, what="num_layers", flags=True
    )
    # The drawn tokens and their copies, as `lyapunov_spectrum` holds them.
    return plan.memory(
        args.batch, args.n, args.d, args.heads, itemsize, sharding_devices(args), starts=TOKEN_COPIES
    )


def _check_memory_before_drawing(args, k: int) -> None:
    """Refuse a run that cannot fit before its starting tokens are drawn (the library's own check
    comes after them: ``--batch 100000000`` was killed by the kernel at 16 GB while drawing)."""
    from .._run._memory import check_memory

    check_memory(
        memory_estimate(args, k),
        what=f"a Lyapunov spectrum of k={k} in dimension {args.n * args.d} for {args.batch} trajectories",
        fix="lower --batch (the starting tokens grow with it), --k, or pass a smaller --chunk.",
    )


def _checkpoint_model(args):
    """As `_model` for ``--checkpoint``; ``extra["config"]`` holds the real architecture, which
    replaces the random model's flags in ``lyapunov.json`` (as for ``simulate --checkpoint``)."""
    from ._checkpoint import (
        _ALLOWED,
        _FALLBACK_MODEL,
        _check_inputs,
        _mask_of,
        _refuse_model_flags,
        architecture,
    )
    from ._excerpts import check_files_before_loading, count_excerpts_before_loading
    from ._scheme import check_mix_depth, scheme_of

    given = args.__dict__.pop("checkpoint_flags_given")
    _refuse_model_flags(args, given)
    scheme = scheme_of(args, given)  # --placement, --ln, ...: the trained block re-normalised
    check_nonnegative(args, "num_layers", "batch", minimum=1)
    # Every check that needs no weights first (a refusal loads neither JAX nor the model).
    lyapunov_plan(args, args.num_layers if "num_layers" in given else None, None)
    check_files_before_loading(args.checkpoint)
    count_excerpts_before_loading(args, given)
    from .._trained._stack import load_checkpoint  # JAX loads only now
    from ..lyapunov import spectrum_dim

    try:
        ckpt = load_checkpoint(args.checkpoint)
    except UsageError as err:
        raise UsageError(f"--{err}") from None
    mask = _mask_of(args, ckpt, given)
    layers = args.num_layers if "num_layers" in given else ckpt.num_layers
    check_mix_depth(scheme, layers)
    ids, source = _check_inputs(args, ckpt, given)
    try:
        path = {"attention": args.attention} if "attention" in given else {}  # as simulate's
        layer = ckpt.layers(ids.shape[1], args.variant or "full", mask, window=args.window, **scheme, **path)
    except ValueError as err:
        raise UsageError(f"--mask {mask} --window {args.window}: {err}") from None
    k = check_spectrum_args(args, spectrum_dim(layer), layers)
    check_out_dir(args.out)
    variant = args.variant or "full"
    config = {
        key: (str(v) if isinstance(v, Path) else v)
        for key, v in vars(args).items()
        if key != "func" and (key not in _FALLBACK_MODEL or key in _ALLOWED)
    }
    config |= {"variant": variant, "mask": mask, "n": int(ids.shape[1]), "batch": int(ids.shape[0])}
    config |= architecture(ckpt, variant, scheme)
    extra = {
        "checkpoint": ckpt.provenance(),
        "inputs": source,
        "mask": mask,
        "num_layers": layers,
        "config": config,
    }
    title = f"{ckpt.arch} {args.variant or 'full'} mask={mask} n={ids.shape[1]} d={ckpt.d}"
    return layer, ckpt.embed(ids), layers, k, extra, title


def exponent_table(spectrum: dict) -> str:
    """Every exponent (batch mean and std), its factor e^lambda and its role (docs/glossary.md)."""
    e, unit = spectrum["exponents"], spectrum["unit"]
    lines = [f"  {'i':>3}  {'lambda_i (' + unit + ')':>24}  {'std':>9}  {'e^lambda':>9}  role"]
    for i, (m, sd, role) in enumerate(zip(e["mean"], e["std"], spectrum["roles"]), start=1):
        factor = f"{math.exp(m):.4g}" if m < 700 else "inf"
        lines.append(f"  {i:>3}  {m:>24.6g}  {sd:>9.2g}  {factor:>9}  {role}")
    if "rounding-limited" in spectrum["roles"]:
        lines.append(
            "  rounding-limited: below log(eps) of the dtype per step, so set by rounding (an upper bound "
            "on the true rate); --x64 resolves more"
        )
    return "\n".join(lines)


def run(args) -> int:
    layer, x0, layers, k, extra, title = _model(args)  # the checks first: a refusal loads no JAX
    import jax
    import jax.random as jr

    from .._run._io import CompileTimer, provenance, write_json
    from ..lyapunov import lyapunov_spectrum
    from ..plotting import plot_lyapunov_convergence, plot_lyapunov_spectrum

    say_compiling("lyapunov")
    with CompileTimer() as timer:
        res = lyapunov_spectrum(
            layer,
            x0,
            layers,
            k=k,
            discard=args.discard,
            qr_every=args.qr_every,
            key=jr.fold_in(jr.key(args.seed), 7),
            chunk=args.chunk,
            devices=sharding_devices(args),
            progress=not args.no_progress,
        )
        jax.block_until_ready(res.exponents)
    spectrum = res.to_dict(per_trajectory=args.per_trajectory)
    config = extra.pop("config", None) or {
        key: (str(v) if isinstance(v, Path) else v) for key, v in vars(args).items() if key != "func"
    }
    result = {
        "config": config | {"k": k, "num_layers": layers},
        "seed": args.seed,
        "spectrum": spectrum,
        "flags": {"flagged": res.num_flagged, "batch": int(res.flags.size)},
        "timing": {"compile_s": timer.compile_s, "run_s": timer.run_s},
        "provenance": provenance(),
    } | extra
    args.out.mkdir(parents=True, exist_ok=True)
    write_json(args.out / "lyapunov.json", result)
    plot_lyapunov_spectrum(spectrum, title=title, path=args.out / "spectrum.png")
    plot_lyapunov_convergence(spectrum, title=title, path=args.out / "convergence.png")
    print(
        f"lyapunov: {res.space} space (dim {res.dim}), k={k}, {layers} layers, {spectrum['count']} of "
        f"{spectrum['num_trajectories']} trajectories unflagged; compile {timer.compile_s:.2f}s, "
        f"run {timer.run_s:.2f}s"
    )
    print(exponent_table(spectrum))
    print(f"wrote {args.out / 'lyapunov.json'}, spectrum.png, convergence.png")
    return 0
