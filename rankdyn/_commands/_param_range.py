"""``--param``, ``--from`` and ``--to`` (and ``--param2``): the parameter a command moves, shared by
``rankdyn continue`` and ``rankdyn basins``; checked before JAX loads. `parameter_family` builds the
layer as a function of that parameter.
"""

from __future__ import annotations

import dataclasses
import math

from .._errors import UsageError
from .._model._params import param, reads
from .simulate import check_model_args

__all__ = ["PARAM_CHOICES", "check_param_range", "check_param2", "parameter_family"]

#: The parameters ``--param`` may move: the real-valued layer parameters that vary continuously.
PARAM_CHOICES = ("w", "dqk", "qk_std", "value_std", "ln_radius")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_param_range(args):
    """``--param`` / ``--from`` / ``--to`` (shared with ``rankdyn basins``): a parameter the model
    reads, not also set by its own flag, a finite non-empty range, the model valid at both ends.

    Returns:
        The `ModelConfig` at ``--from``.
    """
    name = args.param
    # qk_std, value_std and ln_radius have no flag of their own: only --param sets them.
    if getattr(args, name, None) is not None:
        raise UsageError(
            f"{_flag(name)} {getattr(args, name)} is ignored: --param {name} moves it from --from to --to; "
            "drop it."
        )
    for v, flag in ((args.p_from, "--from"), (args.p_to, "--to")):
        if not math.isfinite(v):
            raise UsageError(f"{flag} {v}: expected a finite number.")
    if args.p_from == args.p_to:
        raise UsageError(
            f"--from and --to are equal ({args.p_from:g}): give an interval to move --param over."
        )
    if name == "dqk" and args.qk == "zero":
        raise UsageError(
            "--param dqk with --qk zero: uniform attention does not read the temperature (every score is 0); "
            "choose another --qk or another --param."
        )
    if name == "w" and args.d is not None and args.d < 2:  # w is W_V's off-diagonal entry
        raise UsageError(
            f"--param w with --d {args.d}: a 1 x 1 W_V has no off-diagonal entry for w to move; use --d 2 "
            "or more."
        )
    row = param(name)
    if not reads(row, vars(args)):  # a flag left unset reads as its fallback (--ln: sphere)
        on, values = row.reads
        raise UsageError(
            f"--param {name}: the model does not read {name} with {_flag(on)} {getattr(args, on)} "
            "(only with "
            f"{_flag(on)} {' / '.join(map(str, values))}); choose a parameter the model reads."
        )
    return _model_at_ends(args, name, ((args.p_to, "--to"), (args.p_from, "--from")), "--param")


def _model_at_ends(args, name: str, ends, which: str):
    """The `ModelConfig` with ``name`` at each end (the last one is returned). The other flags are
    checked first with ``name`` unset: their errors are theirs, not ``--to 3.0 for --param w``'s."""
    setattr(args, name, None)
    check_model_args(args)  # reads an unset parameter as its fallback
    config = None
    for v, flag in ends:
        setattr(args, name, v)
        try:
            config = check_model_args(args)
        except (UsageError, ValueError) as err:
            raise UsageError(f"{flag} {v} for {which} {name}: {err}") from None
    return config


def check_param2(args) -> None:
    """``--param2 / --from2 / --to2``: all or none, another parameter, a finite non-empty range; the
    model is checked at both ends (and the branches are continued at ``--from2``)."""
    given = [f for f, v in (("--from2", args.q_from), ("--to2", args.q_to)) if v is not None]
    if args.param2 is None:
        if given:
            raise UsageError(f"{' and '.join(given)} need --param2 (the second parameter of the curves).")
        return
    if len(given) != 2:
        raise UsageError("--param2 needs --from2 and --to2 (the range of the second parameter).")
    if args.param2 == args.param:
        raise UsageError(f"--param2 {args.param2} is --param too: choose two different parameters.")
    for v, flag in ((args.q_from, "--from2"), (args.q_to, "--to2")):
        if not math.isfinite(v):
            raise UsageError(f"{flag} {v}: expected a finite number.")
    if args.q_from == args.q_to:
        raise UsageError(f"--from2 and --to2 are equal ({args.q_from:g}): the range of --param2 is empty.")
    name = args.param2
    # qk_std, value_std and ln_radius have no flag of their own: only --param2 sets them.
    if getattr(args, name, None) is not None:
        raise UsageError(
            f"{_flag(name)} {getattr(args, name)} is ignored: --param2 {name} moves it from --from2 to "
            "--to2; drop it."
        )
    if args.period != 1:
        raise UsageError("--param2 follows fixed points (--period 1); drop --period or --param2.")
    row = param(name)
    if not reads(row, vars(args)):
        on, values = row.reads
        raise UsageError(
            f"--param2 {name}: the model does not read {name} with {_flag(on)} {getattr(args, on)} (only "
            f"with {_flag(on)} {' / '.join(map(str, values))}); choose a parameter the model reads."
        )
    # The model check writes the values it used back into args (--w 2.0 for a bidiagonal W_V): the
    # flag of --param must read as the user gave it when check_param_range runs next.
    first = getattr(args, args.param, None)
    _model_at_ends(args, name, ((args.q_to, "--to2"), (args.q_from, "--from2")), "--param2")
    setattr(args, args.param, first)


def parameter_family(config, name: str, p_from: float, seed: int):
    """The layer as a function of ``--param NAME`` (every other flag fixed), its `LayerFamily`, and the
    key of the starts; shared by ``rankdyn continue`` and ``rankdyn basins``.

    Raises:
        UsageError: if the layer does not change with ``NAME`` for these flags.
    """
    import jax.random as jr

    from .._equilibria._arclength import LayerFamily
    from .._model._build import build_layer

    k_layer, k_x0 = jr.split(jr.key(seed))

    def family(v):
        return build_layer(k_layer, dataclasses.replace(config, **{name: float(v)}))

    fam = LayerFamily(family)
    if not fam.reads_parameter(p_from):
        raise UsageError(
            f"--param {name}: the layer does not change with {name} here; choose another parameter."
        )
    return family, fam, k_layer, k_x0
