r"""``rankdyn reproduce``: every claim of the paper regenerated as figures, numbers and a verdict.

One module per target (named after the target with underscores). Each defines

- ``NAME``: the target's contract name (e.g. ``"masks-collapse"``),
- ``CLAIM``: the paper's claim in one or two sentences, citing the theorem or figure,
- ``run(out: pathlib.Path, *, quick: bool, seed: int) -> dict``: writes its PNG figures into
  ``out`` and returns a result dict with at least the keys of `RESULT_KEYS`:
  ``name, claim, setting, measured, verdict, criterion, figures, notes`` (plus an optional
  ``markdown`` block for the report). The verdict is one of `VERDICTS` and is computed in code
  from the measured numbers; ``criterion`` states the rule in words.

`run_targets` imports the modules lazily (so a broken target cannot break the others), runs
them in the order of `TARGETS`, writes ``out/<target>.json`` (with `rankdyn.provenance`) and a
single ``out/report.md``.
"""

from __future__ import annotations

import importlib
import json
import time
import traceback
from pathlib import Path

import numpy as np

__all__ = ["TARGETS", "VERDICTS", "RESULT_KEYS", "run_targets", "resolve_targets", "write_report", "render_target"]

#: Target name -> module path, in the order of the issue ("rankdyn reproduce").
TARGETS: dict[str, str] = {
    "masks-collapse": "rankdyn.experiments.masks_collapse",
    "temperature": "rankdyn.experiments.temperature",
    "layernorm-orthogonal": "rankdyn.experiments.layernorm_orthogonal",
    "depth-table": "rankdyn.experiments.depth_table",
    "counterexample-2d": "rankdyn.experiments.counterexample_2d",
    "equilibria-ranks": "rankdyn.experiments.equilibria_ranks",
    "positive-measure": "rankdyn.experiments.positive_measure",
    "ablation": "rankdyn.experiments.ablation",
    "geometry": "rankdyn.experiments.geometry",
    "undirected": "rankdyn.experiments.undirected",
}

#: The verdicts a target may return (computed from its numbers, never hard-coded).
VERDICTS = ("reproduced", "partially", "not reproduced")

#: Keys every target's result dict must contain.
RESULT_KEYS = ("name", "claim", "setting", "measured", "verdict", "criterion", "figures", "notes")


def resolve_targets(names) -> list[str]:
    """Expand ``[]`` / ``["all"]`` to every target and validate names, keeping the issue's order.

    Raises:
        ValueError: for an unknown name, listing the valid ones.
    """
    names = list(names or ["all"])
    if "all" in names:
        return list(TARGETS)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        raise ValueError(
            f"unknown target(s) {', '.join(map(repr, unknown))}; valid targets: all, {', '.join(TARGETS)}."
        )
    seen = set(names)
    return [n for n in TARGETS if n in seen]


def _check_result(name: str, res) -> dict:
    """Validate a target's result dict against the contract (a broken target is reported, not hidden)."""
    if not isinstance(res, dict):
        raise TypeError(f"target {name!r} returned {type(res).__name__}, expected a dict.")
    missing = [k for k in RESULT_KEYS if k not in res]
    if missing:
        raise TypeError(f"target {name!r} result lacks keys {missing}.")
    if res["verdict"] not in VERDICTS:
        raise TypeError(f"target {name!r} verdict {res['verdict']!r} is not one of {VERDICTS}.")
    return res


def run_targets(names, out, quick: bool = False, seed: int = 0, progress: bool = True) -> dict:
    """Run the named targets, write ``out/<target>.json`` and ``out/report.md``.

    Arguments:
        names: target names (or ``["all"]``); run in the order of `TARGETS`.
        out: output folder (created).
        quick: reduced sizes (every target documents what it reduced).
        seed: base PRNG seed passed to every target.
        progress: show an overall progress bar.

    Returns:
        ``{"results": {name: result dict}, "runtime_s": float, "report": Path, "failed": [names]}``.
        A target that raises is recorded with verdict ``"error"`` and its traceback; the others
        still run.
    """
    from .._io import provenance, write_json

    names = resolve_targets(names)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    failed: list[str] = []
    t_start = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(names), desc="reproduce", unit="target")
    for name in names:
        if bar is not None:
            bar.set_postfix_str(name)
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            mod = importlib.import_module(TARGETS[name])
            res = _check_result(name, mod.run(out, quick=quick, seed=seed))
        except Exception as err:  # noqa: BLE001 - one failing target must not hide the others
            failed.append(name)
            res = {
                "name": name, "claim": "", "setting": {"quick": quick, "seed": seed}, "measured": {},
                "verdict": "error", "criterion": "the target raised an exception",
                "figures": [], "notes": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(),
            }
        res["runtime_s"] = time.perf_counter() - t0
        res["cpu_s"] = time.process_time() - c0  # all threads; wall >> cpu/cores means a busy machine
        res["provenance"] = provenance()
        write_json(out / f"{name}.json", res)
        results[name] = res
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    runtime = time.perf_counter() - t_start
    report = write_report(out, results, runtime_s=runtime, quick=quick, seed=seed)
    return {"results": results, "runtime_s": runtime, "report": report, "failed": failed}


# ---------------------------------------------------------------------------- report


def _fmt_value(v) -> str:
    """Compact text for a JSON-able value (numbers to 4 significant digits, long lists shortened)."""
    from .._io import to_jsonable

    v = to_jsonable(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        flat = np.asarray(v, dtype=object).ravel() if _is_flat_numeric(v) else None
        if flat is not None and len(flat) > 12:
            head = ", ".join(_fmt_value(x) for x in flat[:5])
            tail = ", ".join(_fmt_value(x) for x in flat[-3:])
            return f"[{head}, ..., {tail}] ({len(flat)} values)"
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _is_flat_numeric(v) -> bool:
    return all(x is None or isinstance(x, (int, float)) for x in v)


def _bullets(d: dict, indent: int = 0) -> list[str]:
    """Nested dict -> Markdown bullet list (one level of nesting per indent)."""
    lines = []
    pad = "  " * indent
    for k, v in d.items():
        if isinstance(v, dict) and v and indent < 2:
            lines.append(f"{pad}- `{k}`:")
            lines.extend(_bullets(v, indent + 1))
        else:
            lines.append(f"{pad}- `{k}`: {_fmt_value(v)}")
    return lines


def render_target(res: dict) -> str:
    """One target's section of the report: claim, setting, measured, verdict + criterion, figures, notes."""
    lines = [f"## `{res['name']}`: **{res['verdict']}**", ""]
    lines += [f"**Claim.** {res.get('claim', '')}", ""]
    lines += [f"**Verdict: {res['verdict']}.** Criterion: {res.get('criterion', '')}", ""]
    lines += ["**Setting** (every parameter and seed used):", ""]
    lines += _bullets(res.get("setting", {})) + [""]
    md = res.get("markdown")
    if md:
        lines += [md.rstrip(), ""]
    measured = _bullets(res.get("measured", {}))
    if len(measured) > 40:
        # Long listings fold away (GitHub renders <details>); the target's tables stay visible above.
        lines += ["<details><summary><b>Measured</b> (all numbers, also in the JSON)</summary>", ""]
        lines += measured + ["", "</details>", ""]
    else:
        lines += ["**Measured:**", ""] + measured + [""]
    for fig in res.get("figures", []):
        lines += [f"![{res['name']}: {fig}]({fig})", ""]
    notes = res.get("notes")
    if notes:
        lines += [f"**Notes.** {notes}", ""]
    if "traceback" in res:
        lines += ["```", res["traceback"].rstrip(), "```", ""]
    if "runtime_s" in res:
        lines += [f"*Runtime: {res['runtime_s']:.1f} s wall, {res.get('cpu_s', float('nan')):.1f} s CPU.*", ""]
    return "\n".join(lines)


def write_report(out, results: dict, *, runtime_s: float, quick: bool, seed: int) -> Path:
    """Assemble ``out/report.md``: summary table, total runtime, provenance, then one section per target."""
    from .._io import provenance

    out = Path(out)
    prov = provenance()
    lines = [
        "# rankdyn reproduce: report",
        "",
        "Wu, Ajorlou, Wang, Jegelka, Jadbabaie, *On the Role of Attention Masks and LayerNorm in "
        "Transformers*, NeurIPS 2024. Every verdict below is computed in code from the measured numbers "
        "with the stated criterion.",
        "",
        f"Mode: {'**quick** (reduced sizes; see each target)' if quick else 'full'}; seed {seed}; "
        f"total runtime {runtime_s:.1f} s.",
        "",
        "| target | verdict | wall (s) | CPU (s) | claim |",
        "|---|---|---|---|---|",
    ]
    for name, res in results.items():
        claim = " ".join(str(res.get("claim", "")).split())
        if len(claim) > 140:
            claim = claim[:137] + "..."
        lines.append(f"| [`{name}`](#{name}) | {res['verdict']} | {res.get('runtime_s', float('nan')):.1f} | "
                     f"{res.get('cpu_s', float('nan')):.1f} | {claim} |")
    counts = {v: sum(r["verdict"] == v for r in results.values()) for v in VERDICTS + ("error",)}
    lines += ["", "Verdicts: " + ", ".join(f"{k}: {v}" for k, v in counts.items() if v), ""]
    lines += ["Provenance:", "", "```json", json.dumps(prov, indent=1), "```", ""]
    for name, res in results.items():
        lines += [f'<a id="{name}"></a>', "", render_target(res), "---", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
