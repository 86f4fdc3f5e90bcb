"""Checks shared by the CLI commands: every bad flag value is refused before any compute.

Each check raises `UsageError` (a ValueError) with a message that names the flag, what was received and the
fix; `rankdyn.cli.main` prints it as ``rankdyn <command>: error: ...`` and exits with 2. The
model's own rules live in `rankdyn._model._config.ModelConfig`: `model_config` only maps its field
names to the flags that set them.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import UsageError
from .._model._params import PARAMS, reads

if TYPE_CHECKING:
    from .._model._config import ModelConfig

__all__ = [
    "HelpFormatter",
    "model_config",
    "check_positive",
    "check_nonnegative",
    "check_seed_flag",
    "check_out_dir",
    "MODEL_FLAGS",
    "model_flags",
    "say_compiling",
    "check_plan_memory",
]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` with each flag's default; not for switches (off by default) or a None or empty
    default, whose help text says what happens without the flag."""

    def _get_help_string(self, action):
        if action.default in (None, "", argparse.SUPPRESS) or action.nargs == 0:
            return action.help
        return super()._get_help_string(action)


#: `ModelConfig` field -> the flag that sets it (the table's flags; two fields come from run flags).
MODEL_FLAGS = {p.name: p.flag for p in PARAMS if p.flag} | {
    "num_layers": "--num-layers",
    "output_projection": "--heads",
}
#: Flags without a default on the CLI, so that a given one can be told apart (refused where it
#: would be ignored, or combined with --dropout); their help says the default.
_UNSET_ON_CLI = ("x0", "attn_dropout", "hidden_dropout")


def model_flags(g) -> None:
    """One argparse flag per row of `rankdyn._model._params.PARAMS` that has one (``flag``)."""
    for p in PARAMS:
        if not p.flag:
            continue
        kw = {"dest": p.name, "help": p.help}
        if p.kind == "bool":
            kw["action"] = "store_true"
        else:
            kw["type"] = {"int": int, "real": float}.get(p.kind, str)
            if p.choices:
                kw["choices"] = p.choices
            default = p.tool_default if p.tool_default is not None else p.default
            shown = p.fallback if p.fallback is not None else default
            if p.name in _UNSET_ON_CLI or p.fallback is not None:
                default = None
                kw["help"] += f" (default: {shown})"
            kw["default"] = default
            if p.name.endswith("dropout"):
                kw["metavar"] = "P"
        g.add_argument(p.flag, **kw)


def model_config(args: argparse.Namespace) -> ModelConfig:
    """The `ModelConfig` of the model flags (`rankdyn._commands.simulate.add_model_flags`).

    ``--dropout P`` sets the attention and the hidden dropout; ``--attn-dropout`` and
    ``--hidden-dropout`` set one each (not together with ``--dropout``). Flags left unset that
    the model reads are written back into ``args`` with the value used (``--w`` 2.0 for a
    bidiagonal W_V, ``--ln sphere``, ``--x0 sphere``), so the saved config says what ran.
    """
    # Imported here: `_config` loads JAX, which ``--help`` and the flag checks do not need.
    from .._model._config import ModelConfig, Names

    flags = dict(MODEL_FLAGS)
    values = {p.name: getattr(args, p.name) for p in PARAMS if p.flag and getattr(args, p.name) is not None}
    if args.dropout is not None:
        if args.attn_dropout is not None or args.hidden_dropout is not None:
            raise UsageError(
                "--dropout sets both rates: give either --dropout or --attn-dropout/--hidden-dropout."
            )
        values.update(attn_dropout=args.dropout, hidden_dropout=args.dropout)
        flags.update(attn_dropout="--dropout", hidden_dropout="--dropout")
    values["output_projection"] = args.heads > 1
    values["num_layers"] = getattr(args, "num_layers", None) if args.per_layer_weights else None
    config = ModelConfig.from_mapping(values, where=Names.flags(flags))
    depth = getattr(args, "num_layers", None)
    if config.mix_layers is not None and depth is not None and config.mix_layers > depth:
        raise UsageError(
            f"--mix-layers {config.mix_layers} is outside [0, --num-layers {depth}]: Mix-LN's post-LN layers "
            "are among the run's layers; choose at most --num-layers."
        )
    resolved = config.resolved()
    for p in PARAMS:
        if p.flag and (p.fallback is not None or p.name == "x0") and getattr(args, p.name) is None:
            setattr(args, p.name, resolved[p.name] if reads(p, values) else None)
    _check_random_mask(config, resolved)
    return config


def _check_random_mask(config, resolved) -> None:
    """An edge-probability random mask is drawn as an (n, n) array on the host: refuse one that
    cannot fit before it is drawn (32 GiB at n = 65536 before round 5; n^2 bytes and its edges now)."""
    if config.mask != "random" or config.mask_degree is not None:
        return
    from .._model._masks import random_mask_bytes
    from .._run._memory import MemoryEstimate, check_memory, host_available

    check_memory(
        MemoryEstimate({"random mask": random_mask_bytes(config.n, resolved["mask_p"])}),
        what=f"--mask random at --n {config.n}",
        fix="give --mask-degree K (K keys per token, a sparse random mask at any n) instead of "
        "the edge probability --mask-p, or lower --n.",
        available=(host_available(), "host RAM"),
    )


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_positive(args: argparse.Namespace, *dests: str) -> None:
    """Each flag (an argparse ``dest``) is None or a finite number > 0 (tolerances, rates)."""
    for dest in dests:
        v = getattr(args, dest)
        if v is not None and not (math.isfinite(v) and v > 0):
            raise UsageError(f"{_flag(dest)} {v}: expected a finite number > 0.")


def check_band(args: argparse.Namespace, *dests: str) -> None:
    """Each flag is None or a finite number in [0, 1): a band on the multipliers' moduli around 1
    (``--stability-tol 5`` called every multiplier marginal)."""
    for dest in dests:
        v = getattr(args, dest)
        if v is not None and not (math.isfinite(v) and 0 <= v < 1):
            raise UsageError(f"{_flag(dest)} {v}: expected a number in [0, 1) (a band on |lambda| - 1).")


def check_nonnegative(args: argparse.Namespace, *dests: str, minimum: int = 0) -> None:
    """Each integer flag is None or >= ``minimum`` (counts of layers, steps, starts)."""
    for dest in dests:
        v = getattr(args, dest)
        if v is not None and v < minimum:
            raise UsageError(f"{_flag(dest)} {v}: expected an integer >= {minimum}.")


def check_seed_flag(seed: int, flag: str = "--seed") -> None:
    """The seed rule of `ModelConfig`, for commands without a model (reproduce)."""
    from .._model._config import Names, check_seed

    check_seed(seed, "seed", Names.flags({"seed": flag}))


def _exists(p: Path) -> bool:
    try:
        return p.exists()
    except OSError:  # e.g. a parent without search permission: treat as missing, probed below
        return False


def check_out_dir(path: Path, flag: str = "--out") -> None:
    """``path`` is a folder that exists and is writable, or can be created: refuse otherwise.

    Nothing is left behind: writability is probed by creating and removing a temporary folder
    in the nearest existing ancestor (``os.access`` is not enough: root, read-only mounts).
    """
    p = Path(path)
    if _exists(p) and not p.is_dir():
        raise UsageError(
            f"{flag} {p} is an existing file, not a folder; give a folder path (it is created if missing)."
        )
    base = p.absolute()
    while not _exists(base):
        base = base.parent
    if not base.is_dir():
        raise UsageError(
            f"{flag} {p}: {base} is a file, so the folder cannot be created there; choose another path."
        )
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".rankdyn-probe-", dir=base))
    except OSError as err:
        raise UsageError(
            f"{flag} {p}: cannot write in {base} ({err.strerror or err}); choose a writable folder."
        ) from None


def check_rank_tol_read(args, names) -> None:
    """``--rank-tol`` is refused when no recorded metric reads it (both simulate paths call this)."""
    from .._observe._tolerances import RANK_METRICS

    if args.rank_tol is not None and not set(RANK_METRICS) & set(names):
        raise UsageError(
            f"--rank-tol {args.rank_tol} is ignored: no metric of --metrics {args.metrics} reads it (only "
            f"{', '.join(RANK_METRICS)}); drop it or add a rank metric."
        )


def say_compiling(command: str, what: str = "the layer program", note: str | None = None) -> None:
    """One line on stderr before a command's first compile, after every refusal: JAX traces and XLA
    compiles the program before the first result (seconds for a small model, minutes for a deep
    trained stack at long context), and a quiet terminal must not look like a hang. stdout stays
    for what other programs read. ``note`` (a default the command chose) is printed first."""
    import sys

    if note:
        print(note, file=sys.stderr)
    print(f"rankdyn {command}: compiling {what} (once per run, before the first result) ...", file=sys.stderr)


def check_plan_memory(plan, *, what: str, fixes: dict[str, str]) -> int:
    """Refuse a run that cannot fit, from its plan's estimate (`SimulatePlan.memory`) against the
    backend's free memory (JAX loads here, for the backend); ``fixes``: the advice per part.
    Returns the estimated bytes."""
    import jax

    from .._run._memory import check_memory

    est = plan.memory(jax.default_backend())
    check_memory(est, fix=fixes[est.largest], what=what)
    return est.total
