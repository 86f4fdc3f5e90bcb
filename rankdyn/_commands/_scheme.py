"""The flags that re-normalise a trained checkpoint (``--checkpoint X --placement P --ln L``).

``--placement``, ``--ln``, ``--mix-layers``, ``--ngpt-alpha`` and ``--qk-norm`` keep the trained
attention and MLP weights and replace the normalisation (`rankdyn.checkpoints.Checkpoint.layers`,
docs/theory.md#trained-checkpoints-re-normalised); they are read with ``--variant full`` only and
checked here, without JAX, before the weights load.
"""

from __future__ import annotations

from .._errors import UsageError

__all__ = ["SCHEME_FLAGS", "scheme_of", "check_mix_depth", "scheme_record"]

#: The flags (argparse dests) that re-normalise the trained block.
SCHEME_FLAGS = ("placement", "ln", "mix_layers", "ngpt_alpha", "qk_norm")


def scheme_of(args, given: dict) -> dict:
    """The re-normalisation flags as `Checkpoint.layers` arguments, checked before the weights load.

    Unset ``--placement`` and ``--ln`` keep the checkpoint's own; ``--mix-layers`` is checked
    against the depth once it is known (`check_mix_depth`).

    Raises:
        UsageError: a flag with a SAN variant, a flag the placement does not read, ``--placement
            ngpt`` without ``--ln sphere``, ``mix`` without ``--mix-layers``, a value out of range.
    """
    flags = {d: given[d] for d in SCHEME_FLAGS if d in given}
    if not flags:
        return {}
    variant = args.variant or "full"
    if variant != "full":
        raise UsageError(
            f"{' '.join(flags.values())} re-normalise the trained block: use them with --variant full, "
            f"not --variant {variant}."
        )
    placement = args.placement if "placement" in flags else None
    ln = args.ln if "ln" in flags else None
    for dest, needs in (("mix_layers", "mix"), ("ngpt_alpha", "ngpt")):
        if dest in flags and placement != needs:
            raise UsageError(
                f"{flags[dest]} {getattr(args, dest)} is ignored by --placement {placement or 'own'}; "
                f"drop it (only --placement {needs} reads it)."
            )
        if placement == needs and dest not in flags:
            raise UsageError(f"--placement {needs} needs --{dest.replace('_', '-')}.")
    if placement == "ngpt" and ln != "sphere":
        raise UsageError(
            "--placement ngpt keeps every token on the sphere: add --ln sphere (got "
            f"{'--ln ' + ln if ln else 'the trained norm'})."
        )
    if placement == "none" and ln is not None:
        raise UsageError(f"--ln {ln} is ignored by --placement none (no norm); drop it.")
    if "mix_layers" in flags and args.mix_layers < 0:
        raise UsageError(f"--mix-layers {args.mix_layers} is outside [0, --num-layers].")
    if "ngpt_alpha" in flags and not 0 < args.ngpt_alpha <= 1:
        raise UsageError(f"--ngpt-alpha {args.ngpt_alpha}: nGPT's step alpha must be in (0, 1].")
    out = {"placement": placement, "ln": ln, "qk_norm": bool(args.qk_norm)}
    out |= {d: getattr(args, d) for d in ("mix_layers", "ngpt_alpha") if d in flags}
    return out


def check_mix_depth(scheme: dict, layers: int) -> None:
    """``--mix-layers`` within [0, layers] (the depth is the checkpoint's when --num-layers is unset)."""
    k = scheme.get("mix_layers")
    if k is not None and k > layers:
        raise UsageError(f"--mix-layers {k} is outside [0, --num-layers {layers}]; choose at most {layers}.")


def scheme_record(scheme: dict) -> dict:
    """A re-normalised run's placement, norm and scheme parameters, as the config records them."""
    out = {k: v for k, v in scheme.items() if v is not None and k != "qk_norm"}
    return out | ({"qk_norm": True} if scheme.get("qk_norm") else {})
