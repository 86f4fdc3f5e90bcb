r"""``rankdyn reproduce``: every claim of the paper regenerated as figures, numbers and a verdict.

Each target is one record in `rankdyn._reproduce._registry.REGISTRY` (name, module, float64,
needs a checkpoint, shares runs) and one module in a family sub-package (``sim/``, ``theory/``,
``pretrained/``, ``flow/``) that defines

- ``NAME``: the target's contract name (e.g. ``"masks-collapse"``),
- ``CLAIM``: the paper's claim in one or two sentences, citing the theorem or figure,
- ``sizes``, ``compute``, ``checks``, ``render``, ``describe`` (`rankdyn._reproduce._target`),
  which `run_target` composes into a result dict with at least the keys of `RESULT_KEYS`:
  ``name, claim, setting, measured, verdict, criterion, figures, notes`` (plus ``checks``,
  ``key_numbers``, ``markdown`` and optionally ``model``). The verdict is one of `VERDICTS` and is
  computed in code from the measured numbers; ``criterion`` states the rule in words.

`run_targets` imports the modules lazily (so a broken target cannot break the others), runs
them in the order of `TARGETS`, writes ``out/<target>.json`` (with `rankdyn.provenance`), a short
``out/report.md`` and the full listings ``out/report/<target>.md`` (`_report`).
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

from ._registry import REGISTRY, Target, run_target, target
from ._report import render_target, write_report

__all__ = [
    "TARGETS",
    "CHECKPOINT_TARGETS",
    "EXTENDED_TARGETS",
    "VERDICTS",
    "CLAIM_VERDICTS",
    "OPEN_QUESTION_VERDICTS",
    "RESULT_KEYS",
    "run_targets",
    "resolve_targets",
    "write_report",
    "render_target",
    "REGISTRY",
    "Target",
    "target",
    "run_target",
]

#: Target name -> module path, in the order of the issue ("rankdyn reproduce"); from `REGISTRY`.
TARGETS: dict[str, str] = {t.name: t.module for t in REGISTRY}

#: The targets that run on a trained checkpoint (``--checkpoint``: a path or a loaded
#: `rankdyn.checkpoints.Checkpoint`; default MiniLM when installed).
CHECKPOINT_TARGETS = tuple(t.name for t in REGISTRY if t.needs_checkpoint)

#: The extended tier: targets beyond the paper that ``all`` leaves out (``--extended`` adds them).
EXTENDED_TARGETS = tuple(t.name for t in REGISTRY if t.extended)

#: The verdicts a claim of the paper may get (computed from its numbers, never hard-coded).
#: "not testable here" means the target could not run what its checks need on this machine
#: (e.g. no trained checkpoint installed); it is never a failure of the claim.
CLAIM_VERDICTS = ("reproduced", "partially", "not reproduced", "not testable here")

#: The verdicts of an open question (the authors' conjecture, not a claim they prove): a search
#: either found a counterexample or found none with its positive control passing.
OPEN_QUESTION_VERDICTS = ("counterexample found", "no evidence against", "inconclusive")

#: Every verdict word a target may return.
VERDICTS = CLAIM_VERDICTS + OPEN_QUESTION_VERDICTS

#: Keys every target's result dict must contain.
RESULT_KEYS = ("name", "claim", "setting", "measured", "verdict", "criterion", "figures", "notes")


def resolve_targets(names, extended: bool = False) -> list[str]:
    """Expand ``[]`` / ``["all"]`` to the main job's targets and validate names, in registry order.

    Arguments:
        names: target names, or ``["all"]`` (the default when empty).
        extended: ``all`` also covers the extended tier (`EXTENDED_TARGETS`); with named targets it
            would be ignored, so it is refused.

    Raises:
        UsageError: for an unknown name (listing the valid ones), "all" mixed with other names, or
            ``extended`` with named targets.
    """
    from .._errors import UsageError

    names = list(names or ["all"])
    unknown = [n for n in names if n != "all" and n not in TARGETS]
    if "all" in names and (unknown or len(names) > 1):
        raise UsageError(
            f"'all' cannot be combined with other names (got {', '.join(map(repr, names))}); "
            "pass 'all' alone "
            f"or a list of targets from: {', '.join(TARGETS)}."
        )
    if "all" in names:
        return [n for n in TARGETS if extended or n not in EXTENDED_TARGETS]
    if unknown:
        raise UsageError(
            f"unknown target(s) {', '.join(map(repr, unknown))}; valid targets: all, {', '.join(TARGETS)}."
        )
    if extended:
        raise UsageError(
            "--extended adds the extended tier to 'all'; with named targets it would be ignored: "
            "drop --extended, or name the extended targets you want."
        )
    seen = set(names)
    return [n for n in TARGETS if n in seen]


def _check_result(name: str, res) -> dict:
    """Validate a target's result dict against the contract (a broken target is reported, not hidden)."""
    if not isinstance(res, dict):
        raise RuntimeError(f"target {name!r} returned {type(res).__name__}, expected a dict.")
    missing = [k for k in RESULT_KEYS if k not in res]
    if missing:
        raise RuntimeError(f"target {name!r} result lacks keys {missing}.")
    if res["verdict"] not in VERDICTS:
        raise RuntimeError(f"target {name!r} verdict {res['verdict']!r} is not one of {VERDICTS}.")
    return res


def run_flags(quick: bool, seed: int, weights_sha256: str | None = None) -> dict:
    """The flags that make a target's result what it is, recorded in its JSON: ``reproduce
    --resume`` keeps a target only if these equal its own run's (the folder's record of the last
    run is not enough: a float64 target stayed in a later float32 folder). ``weights_sha256``:
    the checkpoint's (`weights_sha256`), None without one."""
    import jax

    return {
        "quick": bool(quick),
        "seed": int(seed),
        "x64": bool(jax.config.jax_enable_x64),
        "checkpoint": weights_sha256,
    }


def weights_sha256(checkpoint) -> str:
    """The sha256 of a checkpoint's weights: a loaded `Checkpoint`'s own, or read from its path."""
    if hasattr(checkpoint, "sha256"):
        return checkpoint.sha256
    from .._trained._read import read_checkpoint

    return read_checkpoint(checkpoint).sha256


def run_targets(
    names, out, quick: bool = False, seed: int = 0, progress: bool = True, checkpoint=None
) -> dict:
    """Run the named targets, write ``out/<target>.json`` and ``out/report.md``.

    Arguments:
        names: target names (or ``["all"]``); run in the order of `TARGETS`.
        out: output folder (created).
        quick: reduced sizes (every target documents what it reduced).
        seed: base PRNG seed passed to every target.
        progress: show an overall progress bar.
        checkpoint: a trained checkpoint (folder or zip) for the targets that take one (default:
            MiniLM when installed); the others never see it.

    Returns:
        ``{"results": {name: result dict}, "runtime_s": float, "report": Path, "failed": [names]}``.
        A target that raises is recorded with verdict ``"error"`` and its traceback; the others
        still run.
    """
    from .._run._io import provenance, write_json
    from .._run._progress import target_progress

    names = resolve_targets(names)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    failed: list[str] = []
    cache: dict = {}  # shared by the targets of this call only (e.g. the ablation runs)
    # A path's weights are read once for their sha256, not once per target.
    weights = None if checkpoint is None else weights_sha256(checkpoint)
    t_start = time.perf_counter()
    bar = None
    if progress:
        from .._run._progress import progress_bar as tqdm

        bar = tqdm(total=len(names), desc="reproduce", unit="target")
    for name in names:
        if bar is not None:
            bar.set_postfix_str(name)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            # Per step of real work inside the target, with an ETA from its measured steps.
            with target_progress(name, enabled=progress):
                res = run_target(
                    target(name), out, quick=quick, seed=seed, cache=cache, checkpoint=checkpoint
                )
                res = _check_result(name, res)
        except Exception as err:  # noqa: BLE001 - one failing target must not hide the others
            failed.append(name)
            res = {
                "name": name,
                "claim": "",
                "setting": {"quick": quick, "seed": seed},
                "measured": {},
                "verdict": "error",
                "criterion": "the target raised an exception",
                "figures": [],
                "notes": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(),
            }
        res["runtime_s"] = time.perf_counter() - t0
        res["cpu_s"] = time.process_time() - c0  # all threads; wall >> cpu/cores means a busy machine
        res["provenance"] = provenance()
        res["run_flags"] = run_flags(quick, seed, weights)
        write_json(out / f"{name}.json", res)
        results[name] = res
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    runtime = time.perf_counter() - t_start
    report = write_report(out, results, runtime_s=runtime, quick=quick, seed=seed)
    return {"results": results, "runtime_s": runtime, "report": report, "failed": failed}
