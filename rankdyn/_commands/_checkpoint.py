"""``rankdyn simulate --checkpoint``: a trained checkpoint's layer stack on real tokens.

``--checkpoint DIR|ZIP (--text FILE | --input-ids FILE.npy) [--variant V] [--mask M] [--window K]
[--n N] [--batch B] [--num-layers T]``: the trained weights replace every random-model flag, so any
other model flag is refused (one error line naming it) rather than silently ignored. Defaults
differ from the random model's: ``--num-layers`` is the checkpoint's depth, ``--n`` 128 and
``--mask`` the checkpoint's own (complete for BERT, causal for GPT-2). ``--input-ids`` sets the
batch and ``n`` from its shape. The run writes ``OUT/input_ids.npy`` (int32, batch x n) next to
the usual ``metrics.json``, table and ``mu.png``; the provenance names the weights by sha256.
"""

from __future__ import annotations

import argparse
import hashlib
from functools import partial
from pathlib import Path

from .._errors import UsageError
from .._model._params import PARAMS
from .._observe._tolerances import RANK_TOL
from ._excerpts import (
    DEFAULT_N as _DEFAULT_N,
    check_files_before_loading,
    check_inputs_before_loading,
    count_excerpts_before_loading,
    excerpts_after_loading,
)
from ._scheme import SCHEME_FLAGS, check_mix_depth, scheme_of, scheme_record

__all__ = ["add_checkpoint_flags", "checkpoint_requested", "run_checkpoint", "architecture"]

#: What shrinks a checkpoint run's estimate, whichever part is the largest.
_MEMORY_FIX = "lower --batch or --n, or use a smaller --chunk."
#: Flags of `add_model_flags` that a checkpoint run still reads; every other model flag is refused.
_ALLOWED = ("mask", "window", "seed", "x64", "n")
#: Flags (dests) whose default depends on whether --checkpoint is given: their use is recorded.
_RECORDED = ("n", "batch", "num_layers", "mask", "window", "attention")
_EXPLICIT = "_checkpoint_explicit_flags"
#: The flags a checkpoint run reads (and the re-normalising ones), listed from the parser itself.
_READS = "_checkpoint_flags_read"
#: A random model's flags that must have a default when no group titled "model" is found.
#: (The flags of the parameter table, `rankdyn._model._params.PARAMS`, plus the two hand-written ones.)
_FALLBACK_MODEL = tuple(p.name for p in PARAMS if p.flag) + ("per_layer_weights", "dropout")


def _recording(cls):
    """A subclass of the argparse action ``cls`` that notes, per parse, which flags were given."""

    class Recording(cls):
        def __call__(self, parser, namespace, values, option_string=None):
            given = getattr(namespace, _EXPLICIT, None) or {}
            given[self.dest] = option_string
            setattr(namespace, _EXPLICIT, given)
            super().__call__(parser, namespace, values, option_string)

    Recording.__name__ = f"Recording{cls.__name__}"
    return Recording


def add_checkpoint_flags(p: argparse.ArgumentParser) -> None:
    """Add the ``checkpoint`` flag group to the simulate parser (after the model flags)."""
    from .._model._names import VARIANTS

    g = p.add_argument_group(
        "trained checkpoint (replaces the random model; docs/theory.md#trained-checkpoints)"
    )
    g.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        metavar="DIR|ZIP|GGUF|NAME",
        help="HF-layout BERT, GPT-2, MPNet or Llama folder or zip (config.json + model.safetensors "
        "[+ tokenizer.json]), a folder of MPNet's zip slices, a Llama .gguf, or a name that "
        "`rankdyn checkpoints` lists (minilm, smollm2, mpnet)",
    )
    g.add_argument(
        "--text", type=Path, default=None, metavar="FILE", help="text tokenised into --batch excerpts"
    )
    g.add_argument(
        "--input-ids",
        type=Path,
        default=None,
        metavar="FILE.npy",
        help="token ids (batch, n): set --batch and --n",
    )
    g.add_argument(
        "--variant", choices=VARIANTS, default=None, help="full (as trained) or a SAN variant (default: full)"
    )
    model = next((a for a in p._action_groups if a.title == "model"), None)
    dests = {a.dest for a in model._group_actions} if model is not None else set(_FALLBACK_MODEL)
    # The refusal's list of what is read comes from the flags this parser has, not from a list by hand.
    read = [a.option_strings[0] for a in p._actions if a.option_strings and a.dest in _ALLOWED + _RECORDED]
    read += [a.option_strings[0] for a in g._group_actions if a.dest != "checkpoint"]
    scheme = [a.option_strings[0] for a in p._actions if a.option_strings and a.dest in SCHEME_FLAGS]
    p.set_defaults(**{_EXPLICIT: None, _READS: (tuple(read), tuple(scheme))})
    for action in p._actions:
        if action.dest in dests - set(_ALLOWED) or action.dest in _RECORDED:
            action.__class__ = _recording(type(action))


def checkpoint_requested(args: argparse.Namespace) -> bool:
    """True for a checkpoint run.

    Removes the recording attribute; refuses checkpoint-only flags without one.
    """
    given = vars(args).pop(_EXPLICIT, None) or {}
    reads = vars(args).pop(_READS, None) or ((), ())
    given = _Given(given, reads=reads)
    args.checkpoint_flags_given = given  # read by run_checkpoint, removed there
    if args.checkpoint is None:
        del args.checkpoint_flags_given
        for flag in ("text", "input_ids", "variant"):
            if getattr(args, flag) is not None:
                raise UsageError(
                    f"--{flag.replace('_', '-')} needs --checkpoint DIR|ZIP (the trained weights to run)."
                )
        for dest in ("checkpoint", "text", "input_ids", "variant"):
            delattr(args, dest)  # a random-model run's config stays as before
        return False
    return True


class _Given(dict):
    """The flags given (dest -> option string), and ``reads``: the flags a checkpoint run reads and
    those that re-normalise it, as `add_checkpoint_flags` listed them from the parser."""

    def __init__(self, given: dict, reads: tuple[tuple[str, ...], tuple[str, ...]]):
        super().__init__(given)
        self.reads = reads


def _refuse_model_flags(args, given: dict) -> None:
    read, scheme = getattr(given, "reads", ((), ()))
    for dest, flag in given.items():
        if dest not in _ALLOWED and dest not in _RECORDED and dest not in SCHEME_FLAGS:
            raise UsageError(
                f"{flag} does not apply with --checkpoint (the trained weights define the model); "
                f"drop {flag} (only {', '.join(read)} are read with a checkpoint, and with --variant full "
                f"{', '.join(scheme)})."
            )


def _check_inputs(args, ckpt, given: dict):
    """The token ids of the run, from --text or --input-ids, checked before any compute."""
    import numpy as np

    if (args.text is None) == (args.input_ids is None):
        raise UsageError("--checkpoint needs exactly one of --text FILE or --input-ids FILE.npy.")
    if args.input_ids is not None:
        where = f"--input-ids {args.input_ids}"
        try:
            raw = np.load(args.input_ids, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise UsageError(
                f"{where}: cannot read a .npy array ({err}); save one with numpy.save."
            ) from None
        ids = ckpt.check_ids(raw, where=where)
        for dest, value in (("batch", ids.shape[0]), ("n", ids.shape[1])):
            if dest in given and getattr(args, dest) != value:
                raise UsageError(
                    f"--{dest} {getattr(args, dest)} disagrees with {where} of shape {ids.shape}, which sets "
                    f"--batch and --n; drop --{dest}."
                )
        return ids, {"input_ids": str(args.input_ids)}
    n = args.n if "n" in given else _DEFAULT_N
    if not 1 <= n <= ckpt.max_positions:
        raise UsageError(
            f"--n {n}: the checkpoint has {ckpt.max_positions} positions (max_position_embeddings); "
            f"use --n {min(_DEFAULT_N, ckpt.max_positions)} or at most {ckpt.max_positions}."
        )
    if args.batch < 1:
        raise UsageError(f"--batch {args.batch}: expected at least one excerpt.")
    try:
        data = args.text.read_bytes()
    except OSError as err:
        raise UsageError(
            f"--text {args.text}: cannot read it ({err.strerror or err}); give a text file."
        ) from None
    from .._trained._text_files import utf8_text

    text = utf8_text(data, f"--text {args.text}")  # never replacement characters
    ids = excerpts_after_loading(args, ckpt, given, text, n, where=f"--text {args.text}")
    return ids, {"text": str(args.text), "text_sha256": hashlib.sha256(data).hexdigest()}


def _mask_of(args, ckpt, given: dict):
    from .._model._config import MASKS_WITH_WINDOW

    mask = args.mask if "mask" in given else ckpt.own_mask
    if args.window != 1 and mask not in MASKS_WITH_WINDOW:
        raise UsageError(
            f"--window {args.window} is ignored by the mask {mask!r}; drop --window or choose one of "
            f"{', '.join(MASKS_WITH_WINDOW)} with --mask."
        )
    return mask


def architecture(ckpt, variant: str, scheme: dict | None = None) -> dict:
    """The model a checkpoint run iterates, in the random model's config names (one schema for both):
    ``arch``, ``d``, ``heads``, ``kv_heads``, ``dqk`` (head width), ``placement``, ``ln``, ``mlp``
    (its activation, or None), ``skip``, ``positions`` and ``trained_layers``."""
    full = variant == "full"
    with_ln = full or variant.endswith("-ln")
    positions = {"llama": "rotary", "mpnet": "learned + relative bias"}.get(ckpt.arch, "learned")
    return {
        "arch": ckpt.arch,
        "d": ckpt.d,
        "heads": ckpt.heads,
        "kv_heads": ckpt.kv_heads or ckpt.heads,
        "dqk": int(ckpt.blocks.w_q.shape[-1]),
        "placement": ckpt.placement if with_ln else "none",
        "ln": ("rms" if ckpt.arch == "llama" else "layernorm") if with_ln else None,
        "mlp": (("swiglu" if ckpt.arch == "llama" else ckpt.activation) if full else None),
        "skip": full or "skip" in variant,
        "positions": positions,
        "trained_layers": ckpt.num_layers,
    } | scheme_record(scheme or {})


def run_checkpoint(args) -> int:
    """The checkpoint branch of ``rankdyn simulate`` (see the module docstring)."""
    from .._arguments import check_count
    from .._observe._names import parse_metrics
    from .._run._plan import SimulatePlan, check_chunk, check_rank_tol
    from ._checks import check_out_dir, check_plan_memory, check_seed_flag, say_compiling
    from ._table import default_metrics, plot_names, print_table, print_written, save_figures

    given = args.__dict__.pop("checkpoint_flags_given")
    _refuse_model_flags(args, given)
    scheme = scheme_of(args, given)
    check_seed_flag(args.seed)  # recorded with the result (a checkpoint run draws nothing)
    metrics_note = default_metrics(args, long=True)  # said after the refusals
    names = parse_metrics(args.metrics, where=f"--metrics {args.metrics}")
    plot_names(args.plot, names)  # a --plot name that is not recorded is refused before compute
    # The plan's checks (`rankdyn._run._plan`) of what is known before the weights load; the
    # plan itself, built once the depth and the excerpts are known, checks them all.
    check_count(args.num_layers, "num_layers", minimum=0, flags=True)
    check_count(args.batch, "batch", flags=True)
    check_count(args.save_every, "save_every", flags=True)
    if args.rank_tol is not None:
        check_rank_tol(args.rank_tol, flags=True)
    check_chunk(args.chunk, flags=True, what="excerpts")
    check_inputs_before_loading(args)
    check_files_before_loading(args.checkpoint)
    count_excerpts_before_loading(args, given)
    # JAX and the weights load only now: every refusal above answers at once.
    import jax
    import numpy as np

    from .._model._graph import graph_info
    from .._run._io import CompileTimer, atomic_write, provenance, savez, write_json
    from .._run._simulate import simulate
    from .._trained._stack import load_checkpoint

    try:
        ckpt = load_checkpoint(args.checkpoint)
    except UsageError as err:  # "checkpoint PATH: ..." -> "--checkpoint PATH: ..."
        raise UsageError(f"--{err}") from None
    mask = _mask_of(args, ckpt, given)
    layers = args.num_layers if "num_layers" in given else ckpt.num_layers
    check_mix_depth(scheme, layers)
    ids, source = _check_inputs(args, ckpt, given)
    batch, n = ids.shape
    from .._model._config import Names, check_mask_size
    from .._model._mask_structure import as_structure, make_mask_structure
    from .._model._masks import make_mask
    from ._checks import check_rank_tol_read

    # The random path's checks, on this path too: one validation serves both.
    check_mask_size(mask, n, args.window, 4, 1, Names.flags())
    check_rank_tol_read(args, names)
    # --seed reaches --mask random (it was built with seed 0 whatever --seed said).
    mask_arg = make_mask("random", n, window=args.window, seed=args.seed) if mask == "random" else mask
    # The estimate follows the path the layer will take ((n, n) scores dense, O(n) per head
    # blocked, in the blocks the layer chooses) and answers before the layer is built.
    attention = args.attention if "attention" in given else "dense"  # a trained stack stays dense
    item = ckpt.dtype.itemsize
    weights = sum(int(np.prod(a.shape)) for a in jax.tree.leaves((ckpt.blocks, ckpt.embeddings))) * item
    plan = SimulatePlan(
        n=n,
        d=ckpt.d,
        heads=ckpt.heads,
        dv=int(ckpt.blocks.w_v.shape[-1]),
        batch=batch,
        num_layers=layers,
        save_every=args.save_every,
        rank_tol=RANK_TOL if args.rank_tol is None else args.rank_tol,  # --rank-tol is unset by default
        chunk=args.chunk,
        itemsize=item,
        metrics=names,
        per_trajectory=args.per_trajectory,
        attention=attention,
        logit_bias=ckpt.position_bias is not None,
        mask=(
            partial(make_mask_structure, mask_arg, n, window=args.window)
            if isinstance(mask_arg, str)
            else partial(as_structure, mask_arg)
        ),
        weights_bytes=weights,
        flags=True,
    )
    est = check_plan_memory(
        plan,
        what=f"--checkpoint --batch {batch} --n {n}",
        fixes=dict.fromkeys(("working set of one chunk", "per-layer metrics", "weights"), _MEMORY_FIX),
    )
    try:
        layer = ckpt.layers(
            n, args.variant or "full", mask_arg, window=args.window, attention=attention, **scheme
        )
    except ValueError as err:
        raise UsageError(f"--mask {mask} --window {args.window}: {err}") from None
    check_out_dir(args.out)

    say_compiling("simulate", "the checkpoint's layer program", note=metrics_note)
    x0 = ckpt.embed(ids)
    with CompileTimer() as timer:
        traj = simulate(
            layer,
            x0,
            layers,
            save_every=args.save_every,
            rank_tol=plan.rank_tol,
            metrics=names,
            per_trajectory=args.per_trajectory,
            chunk=args.chunk,
            progress=not args.no_progress,
            devices=_devices(args),
            plan=plan,
        )
        jax.block_until_ready(traj.summary)
    info = graph_info(layer.mask)  # a MaskStructure on the blocked path: no n x n array
    summary = traj.summary.to_dict()
    # The random model's flags do not describe this run: the checkpoint's architecture replaces them.
    config = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(args).items()
        if k != "func" and (k not in _FALLBACK_MODEL or k in _ALLOWED)
    }
    config |= {"variant": args.variant or "full", "mask": mask, "n": n, "batch": batch, "num_layers": layers}
    config |= architecture(ckpt, args.variant or "full", scheme)
    config["attention"] = layer.attention_path  # the path taken (dense unless --attention said so)
    result = {
        "config": config,
        "checkpoint": ckpt.provenance() | {"own_mask": ckpt.own_mask, "placement": ckpt.placement},
        "inputs": source | {"input_ids_file": "input_ids.npy"},
        "graph": info.to_dict(),
        "layers": np.asarray(traj.layers),
        "metrics": summary,
        "count": np.asarray(traj.summary.count).astype(int),
        "flags": {
            "nonfinite": int(traj.summary.nonfinite),
            "degenerate_ln": int(traj.summary.degenerate),
            "batch": batch,
        },
        "memory_estimate_bytes": est,
        "timing": {"compile_s": timer.compile_s, "run_s": timer.run_s},
        "provenance": provenance() | {"checkpoint_path": ckpt.path, "weights_sha256": ckpt.sha256},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out / "input_ids.npy", lambda f: np.save(f, ids.astype(np.int32)))
    if args.per_trajectory:
        arrays = {k: np.asarray(v) for k, v in traj.metrics.items()}
        arrays |= {"nonfinite": np.asarray(traj.nonfinite), "degenerate": np.asarray(traj.degenerate)}
        savez(args.out / "per_trajectory.npz", {**arrays, "layers": np.asarray(traj.layers)})
        result["per_trajectory_file"] = "per_trajectory.npz"
    title = run_title(ckpt, config["variant"], mask, source, batch, n)
    if args.attention_sinks:
        from .._reproduce.pretrained._sink_controls import scale_matched_init
        from ._table import save_sinks

        # The control: the same stack with its matrices redrawn at the trained norms (the sink
        # targets' control), from the same tokens; the same shapes reuse the compiled scan.
        control = scale_matched_init(ckpt, args.seed).layers(
            n, args.variant or "full", mask_arg, window=args.window, attention=attention, **scheme
        )
        result["attention_sinks"] = save_sinks(layer, x0, layers, args.out, title=title, control=control)
    write_json(args.out / "metrics.json", result)
    figures = []
    if summary:
        names = plot_names(args.plot, tuple(summary))
        figures = save_figures(traj, summary, names, title, args.out, relative=True)
    print_table(traj, summary, info, result, args.metrics)
    if args.attention_sinks:
        print(result["attention_sinks"]["summary"])
    written = ["metrics.json", "input_ids.npy", *result.get("per_trajectory_file", "").split(), *figures]
    if args.attention_sinks:
        written += ["sinks.json", "attention_sinks.png"]
    print_written(args.out, written)
    return 0


def run_title(ckpt, variant: str, mask: str, source: dict, batch: int, n: int) -> str:
    """The figures' title: the model by its name (`known_model_name`, else the architecture and the
    file), the variant, mask, n and d, then the excerpts and the text (or ids) file they came from."""
    from .._trained._installed import known_model_name

    model = known_model_name(ckpt.path) or f"{ckpt.arch} {Path(ckpt.path).name}"
    title = f"{model}, {variant}, mask={mask} n={n} d={ckpt.d}"
    what = (
        f"text {Path(source['text']).name}" if "text" in source else f"ids {Path(source['input_ids']).name}"
    )
    return title + f"\n{batch} excerpts of {n} tokens of {what}"


def _devices(args):
    from ._devices import sharding_devices

    return sharding_devices(args)
