"""The reproduce report: a short ``report.md`` and the full listings ``report/<target>.md``.

``report.md`` (at most `MAX_LINES` lines) holds the summary table, then per target one paragraph
(the claim), its key numbers to 3 significant digits, its checks and its main figure. Each
target's settings, tables, measured values, every figure and notes go to ``report/<target>.md``,
linked from the summary. A figure file that does not exist is named as missing, never linked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

__all__ = ["write_report", "render_target", "format_number", "format_table", "summary_row", "MAX_LINES"]

#: The summary report stays readable: at most this many lines (a target takes 9: its section of
#: 8 and a table row; 26 targets with the extended tier come to about 245, with the header).
MAX_LINES = 270


def format_number(x, digits: int = 3) -> str:
    """A number to ``digits`` significant digits (``0.000123``, ``1.23e+04``); ints, bools and
    text unchanged. The one number format of reports and notes: no 16-digit floats."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x)).lower()
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        return f"{float(x):.{digits}g}"
    return str(x)


def format_table(data: dict, *, key: str = "", digits: int = 3) -> str:
    """A Markdown table of a dict: one row per key; nested dicts give one column per inner key.

    ``{"complete": 0.5123456789, "causal": 0.61}`` -> a two-column table ``| key | value |``;
    ``{"complete": {"rate": 0.51, "bound": 0.9}}`` -> ``| key | rate | bound |``. Numbers to
    ``digits`` significant digits (`format_number`), so raw ``repr`` floats never reach a report.

    Arguments:
        data: the rows.
        key: the first column's header (what the keys are, e.g. "mask").
        digits: significant digits of the numbers.
    """
    nested = all(isinstance(v, dict) for v in data.values()) and data
    cols = list(dict.fromkeys(k for v in data.values() for k in v)) if nested else ["value"]
    rows = [f"| {key} | " + " | ".join(map(str, cols)) + " |", "|" + "---|" * (len(cols) + 1)]
    for k, v in data.items():
        cells = [v.get(c, "") for c in cols] if nested else [v]
        rows.append(f"| {k} | " + " | ".join(format_number(c, digits) for c in cells) + " |")
    return "\n".join(rows)


def _fmt_value(v) -> str:
    """Compact text for a JSON-able value (numbers to 3 significant digits, long lists shortened)."""
    from .._run._io import to_jsonable

    v = to_jsonable(v)
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return format_number(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        flat = all(x is None or isinstance(x, (int, float)) for x in v)
        if flat and len(v) > 12:
            head = ", ".join(_fmt_value(x) for x in v[:5])
            tail = ", ".join(_fmt_value(x) for x in v[-3:])
            return f"[{head}, ..., {tail}] ({len(v)} values)"
        return "[" + ", ".join(_fmt_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_fmt_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def _bullets(d: dict, indent: int = 0) -> list[str]:
    """Nested dict -> Markdown bullet list (two levels of nesting at most)."""
    lines = []
    pad = "  " * indent
    for k, v in d.items():
        if isinstance(v, dict) and v and indent < 2:
            lines.append(f"{pad}- `{k}`:")
            lines.extend(_bullets(v, indent + 1))
        else:
            lines.append(f"{pad}- `{k}`: {_fmt_value(v)}")
    return lines


def _figure(out: Path, fig: str, prefix: str, alt: str) -> str:
    """An image link if the file exists under ``out``, else a plain 'missing' note."""
    if (out / fig).is_file():
        return f"![{alt}]({prefix}{fig})"
    return f"*(figure {fig} was not written)*"


def _checks_table(checks) -> list[str]:
    rows = ["| check | result | detail |", "|---|---|---|"]
    for c in checks:
        detail = " ".join(str(c.get("detail", "")).split())
        rows.append(f"| {c['name']} | {c['status']} | {detail} |")
    return rows


def render_target(res: dict, out: Path | None = None, prefix: str = "../") -> str:
    """One target's full listing: claim, verdict and criterion, checks, setting, tables, measured,
    every figure, notes (``report/<target>.md``; figure links relative to it)."""
    out = Path(".") if out is None else Path(out)
    lines = [f"# `{res['name']}`: **{res['verdict']}**", ""]
    lines += [f"**Claim.** {res.get('claim', '')}", ""]
    lines += [f"**Verdict: {res['verdict']}.** Criterion: {res.get('criterion', '')}", ""]
    if res.get("checks"):
        lines += _checks_table(res["checks"]) + [""]
    lines += ["## Setting", ""] + _bullets(res.get("setting", {})) + [""]
    if res.get("markdown"):
        lines += ["## Tables", "", res["markdown"].rstrip(), ""]
    lines += ["## Measured", ""] + _bullets(res.get("measured", {})) + [""]
    for fig in res.get("figures", []):
        lines += [_figure(out, fig, prefix, f"{res['name']}: {fig}"), ""]
    if res.get("model"):
        lines += [f"**Model.** {res['model']}", ""]
    if res.get("notes"):
        lines += [f"**Notes.** {res['notes']}", ""]
    if "traceback" in res:
        lines += ["```", res["traceback"].rstrip(), "```", ""]
    if "runtime_s" in res:
        lines += [
            f"*Runtime: {res['runtime_s']:.1f} s wall, {res.get('cpu_s', float('nan')):.1f} s CPU.*",
            "",
        ]
    return "\n".join(lines)


def _summary_section(res: dict, out: Path) -> list[str]:
    """A target's part of the short report: title, one paragraph (claim, key numbers, checks,
    link to the full listing) and the main figure, so that every target fits in eight lines."""
    name = res["name"]
    parts = [" ".join(str(res.get("claim", "")).split())]
    key = res.get("key_numbers") or {}
    if key:
        parts.append(
            "Key numbers: "
            + "; ".join(f"{k} {_fmt_value(float(v)) if _is_num(v) else v}" for k, v in key.items())
            + "."
        )
    checks = res.get("checks") or []
    if checks:
        parts.append("Checks: " + "; ".join(f"{c['name']}: {c['status']}" for c in checks) + ".")
    parts.append(f"Full listing: [report/{name}.md](report/{name}.md).")
    lines = [f'<a id="{name}"></a>', "", f"## {name}: {_verdict_text(res)}", "", " ".join(parts), ""]
    figs = res.get("figures") or []
    if figs:
        lines += [_figure(out, figs[0], "", f"{name}: main figure"), ""]
    return lines


def _verdict_text(res: dict) -> str:
    """The verdict, with the model it was measured on when the target ran on a stand-in (the
    optional ``model`` field of a result, e.g. "random-init stand-in, no trained checkpoint")."""
    from ._verdict import partially_why

    text = f"{res['verdict']} (model: {res['model']})" if res.get("model") else res["verdict"]
    why = partially_why(res.get("checks", ())) if res["verdict"] == "partially" else ""
    return f"{text}: {why}" if why else text


#: Header of the summary table's checks column; `summary_row` fills it in the same order.
CHECKS_HEADER = "checks: passed / testable / all"


def summary_row(name: str, res: dict) -> str:
    """One row of the summary table: target, verdict (and model), checks, wall time.

    The checks cell is ``passed / testable / all``, as its header (`CHECKS_HEADER`) says: e.g.
    ``3 / 4 / 5`` is 3 passes among the 4 checks that could fail here, of 5 in all.
    """
    checks = res.get("checks") or []
    testable = [c for c in checks if c["status"] != "not testable here"]
    passed = sum(c["status"] == "pass" for c in testable)
    cell = f"{passed} / {len(testable)} / {len(checks)}" if checks else "-"
    wall = res.get("runtime_s", float("nan"))
    return f"| [{name}](#{name}) | {_verdict_text(res)} | {cell} | {wall:.1f} |"


def _is_num(v) -> bool:
    return (
        isinstance(v, (int, float, np.floating, np.integer))
        and not isinstance(v, bool)
        and math.isfinite(float(v))
    )


def earlier_results(out, results: dict) -> tuple[dict, list[str]]:
    """The results of other targets already in ``out`` (``<target>.json`` of an earlier run).

    ``rankdyn reproduce T --out DIR`` over an earlier run must not write a report of T alone
    next to the other targets' JSON and figures: the report covers every result in the folder.

    Returns:
        ``(earlier, unreadable)``: name -> result dict of the readable ones, and the names whose
        JSON cannot be read (the report lists them as such).
    """
    from ._registry import REGISTRY

    earlier, unreadable = {}, []
    for name in (t.name for t in REGISTRY):
        path = Path(out) / f"{name}.json"
        if name in results or not path.is_file():
            continue
        try:
            res = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            res = None
        if isinstance(res, dict) and isinstance(res.get("verdict"), str) and res.get("name") == name:
            earlier[name] = res
        else:
            unreadable.append(name)
    return earlier, unreadable


def write_report(out, results: dict, *, runtime_s: float, quick: bool, seed: int) -> Path:
    """Write ``out/report.md`` (summary, at most `MAX_LINES` lines) and ``out/report/<target>.md``.

    Results of other targets already in ``out`` (an earlier run) are included and named as such
    (`earlier_results`): the report covers every result in the folder.

    Raises:
        ValueError: if the summary would exceed `MAX_LINES` lines (a target's key numbers or
            checks are too long for a summary; shorten them).
    """
    from .._run._io import provenance

    out = Path(out)
    (out / "report").mkdir(parents=True, exist_ok=True)
    prov = provenance()
    earlier, unreadable = earlier_results(out, results)
    results = {**results, **earlier}  # this run's targets first, then the earlier ones
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    lines = [
        "# rankdyn reproduce: report",
        "",
        "Wu, Ajorlou, Wang, Jegelka, Jadbabaie, *On the Role of Attention Masks and LayerNorm in "
        "Transformers*, NeurIPS 2024. Each verdict is computed from the target's checks. A claim of the "
        "paper is: reproduced = every check testable and passed; partially = at least half of the testable "
        "checks pass, or a check could not fail here; not reproduced = otherwise; not testable here = no "
        "check could fail here. An open question (the authors' conjecture) is: counterexample found; no "
        "evidence against (none found, positive control passed); inconclusive (none found, control missed). "
        "A verdict followed by (model: ...) was "
        "measured on that model. The model, theorems and settings are explained in rankdyn's docs/theory.md; "
        "the words (marginal, closed-form, round-off floor, reference) in docs/glossary.md.",
        "",
        f"Mode: {'quick (reduced sizes)' if quick else 'full'}; seed {seed}; total {runtime_s:.1f} s; "
        f"rankdyn {prov.get('rankdyn', '?')}, jax {prov.get('jax', '?')}; CPU {prov.get('cpu', '?')}"
        + (f", XLA_FLAGS `{prov['xla_flags']}`" if prov.get("xla_flags") else "")
        + (
            f"; compile cache {prov['compile_cache_state']}"
            if prov.get("compile_cache_state")
            else "; no compile cache"
        )
        + ". Verdicts: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + ".",
        "",
    ]
    if earlier or unreadable:
        lines += [
            "Also in this folder, from an earlier run (its mode and seed are in its JSON): "
            + ", ".join(earlier)
            + (
                f"; unreadable, not reported: {', '.join(f'{n}.json' for n in unreadable)}"
                if unreadable
                else ""
            )
            + ".",
            "",
        ]
    lines += [
        f"| target | verdict | {CHECKS_HEADER} | wall (s) |",
        "|---|---|---|---|",
    ]
    lines += [summary_row(name, res) for name, res in results.items()]
    lines.append("")
    for name, res in results.items():
        lines += _summary_section(res, out)
        _write_text(out / "report" / f"{name}.md", render_target(res, out))
    if len(lines) > MAX_LINES:
        raise RuntimeError(
            f"report.md would have {len(lines)} lines (limit {MAX_LINES}); shorten the targets' "
            "key numbers or checks."
        )
    path = out / "report.md"
    _write_text(path, "\n".join(lines))
    _write_text(out / "report" / "provenance.json", json.dumps(prov, indent=1))
    return path


def _write_text(path: Path, text: str) -> None:
    """Atomically, with the umask's mode (`rankdyn._run._io.atomic_write`)."""
    from .._run._io import atomic_write

    atomic_write(path, lambda f: f.write(text), binary=False)
