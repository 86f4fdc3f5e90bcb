"""Each command's reference run at 0.4 (commit df59e61) and at HEAD, side by side, alternated.

    git archive df59e61 | tar -x -C /tmp/v04        # or: git worktree add /tmp/v04 df59e61
    python benchmarks/against_04.py --old /tmp/v04 [--new .] [--rounds 3] [--only simulate-mu ...]
                                    [--json out/against_04.json] [--md out/against_04.md]

Every configuration of `CONFIGS` runs as ``python -m rankdyn ARGS --out TMP --no-progress`` in a
fresh process, with ``PYTHONPATH`` pointing at one tree or the other: the command a user types,
its compile included (the commands other than ``reproduce`` keep no compilation cache). The
flags are ones both versions accept, but for the depth, which 0.4 spells ``--layers``
(`OLD_SPELLING` renames it on the old side; check both ``--help`` from outside the trees: run
inside a checkout, ``python -m rankdyn`` imports that checkout whatever ``PYTHONPATH`` says). Round
r runs the two sides in turn, old first in even rounds and new first in odd ones, so that a
change of load hits both alike. Per run: wall seconds, CPU seconds (user + system of the child,
``resource.getrusage(RUSAGE_CHILDREN)`` deltas: every thread, and robust to time-slicing by other
jobs, unlike wall seconds), and the command's own ``timing`` record (``compile_s``, ``run_s``:
wall seconds inside the process) when its JSON has one. Per side: the min and median over rounds;
the ratio new / old of the medians; and the noise, the larger relative spread
``(max - min) / median`` of the two sides' rounds. A configuration is "slower beyond the noise"
when its CPU ratio exceeds 1 + noise. The 1-minute load average before and after each run is recorded with it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_REF = (
    "--mask causal --n 32 --d 64 --num-layers 128 --batch 1024 --placement post --value orthogonal --qk bert"
)
#: name -> the command's arguments (without --out / --no-progress): the issue's reference size for
#: ``simulate``, and small runs (seconds of compute) of the other commands, from README.md/docs/cli.md.
CONFIGS = {
    "simulate-default": f"simulate {_REF} --x0 sphere",
    "simulate-mu": f"simulate {_REF} --x0 sphere --metrics mu",
    "lyapunov": "lyapunov --n 16 --d 4 --num-layers 256 --k 8 --batch 32",
    "equilibria": "equilibria --mask causal --n 6 --d 6 --value bidiagonal --w 7 --qk zero --x64",
    "continue": "continue --n 2 --d 2 --param w --from 3 --to 0.5",
    "flow": "flow --dynamics sa --mask complete --n 32 --d 3 --beta 4 --time 100 --batch 200 --x64",
}

#: HEAD's flag -> 0.4's spelling of it, applied to the old side's arguments.
OLD_SPELLING = {"--num-layers": "--layers"}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timing(out: Path) -> dict:
    """The command's own ``timing`` record, from the first JSON in ``out`` that has one."""
    for f in sorted(out.glob("*.json")):
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("timing"), dict):
            return {k: round(v, 2) for k, v in data["timing"].items() if isinstance(v, (int, float))}
    return {}


def run_once(tree: Path, args: str, work: Path, old: bool = False) -> dict:
    out = Path(tempfile.mkdtemp(dir=work))
    argv = [OLD_SPELLING.get(a, a) if old else a for a in args.split()]
    cmd = [sys.executable, "-m", "rankdyn", *argv, "--out", str(out), "--no-progress"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    load0 = os.getloadavg()[0]
    c0, w0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    row = {"wall_s": round(time.perf_counter() - w0, 2), "cpu_s": round(_children_cpu() - c0, 2)}
    row.update(rc=proc.returncode, load_before=round(load0, 2), load_after=round(os.getloadavg()[0], 2))
    row.update(_timing(out), out=str(out))
    if proc.returncode:
        row["stderr_tail"] = proc.stderr[-1500:]
    return row


def summary(runs: dict) -> dict:
    """min / median per side, the new / old ratio of medians, and the noise (larger spread)."""
    s = {}
    for key in ("cpu_s", "wall_s", "compile_s", "run_s"):
        vals = {side: [r[key] for r in runs[side] if key in r and r["rc"] == 0] for side in ("old", "new")}
        if not all(vals.values()):
            continue
        if not min(statistics.median(v) for v in vals.values()) > 0:  # a zero timing: no ratio
            continue
        med = {side: statistics.median(v) for side, v in vals.items()}
        spread = max(
            ((max(v) - min(v)) / med[side] for side, v in vals.items() if med[side] > 0), default=0.0
        )
        s[key] = {
            "old_min": min(vals["old"]),
            "old_median": med["old"],
            "new_min": min(vals["new"]),
            "new_median": med["new"],
            "ratio": round(med["new"] / med["old"], 3),
            "noise": round(spread, 3),
        }
        s[key]["slower_beyond_noise"] = s[key]["ratio"] > 1 + s[key]["noise"]
    return s


def markdown(report: dict) -> str:
    lines = [
        f"CPU: {report['cpu']}; rounds alternated (per row: old / new runs); old = {report['old_label']}, "
        f"new = {report['new_label']}; medians (min) over rounds; ratio = new / old of the medians; "
        "noise = the larger (max - min) / median of the two sides.",
        "",
        "| command | runs | CPU s old | CPU s new | CPU ratio | noise | wall s old | wall s new "
        "| compile_s old | compile_s new | run_s old | run_s new | load 1-min |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, entry in report["configs"].items():
        s = entry["summary"]

        def cell(key, side):
            if key not in s:
                return "-"
            return f"{s[key][side + '_median']:.1f} ({s[key][side + '_min']:.1f})"

        loads = [
            r[k]
            for side in ("old", "new")
            for r in entry["runs"][side]
            for k in ("load_before", "load_after")
        ]
        cpu = s.get("cpu_s", {})
        lines.append(
            f"| `{name}` | {len(entry['runs']['old'])}/{len(entry['runs']['new'])} | "
            f"{cell('cpu_s', 'old')} | {cell('cpu_s', 'new')} | {cpu.get('ratio', '-')} | "
            f"{cpu.get('noise', '-')} | {cell('wall_s', 'old')} | {cell('wall_s', 'new')} | "
            f"{cell('compile_s', 'old')} | {cell('compile_s', 'new')} | "
            f"{cell('run_s', 'old')} | {cell('run_s', 'new')} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    return "\n".join(lines) + "\n"


def _cpu_model() -> str:
    """The CPU's name as every speed figure records it (`rankdyn/_run/_io.cpu_model`; no JAX)."""
    sys.path.insert(0, str(ROOT))
    from rankdyn._run._io import cpu_model

    return cpu_model()


def _label(tree: Path) -> str:
    proc = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return proc.stdout.strip() or str(tree)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", type=Path, required=True, help="the 0.4 tree (commit df59e61)")
    p.add_argument("--new", type=Path, default=ROOT, help="the tree to compare (default: this one)")
    p.add_argument("--old-label", default="0.4 (df59e61)")
    p.add_argument(
        "--same-flags", action="store_true", help="no 0.4 spellings on the old side (two new trees)"
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=sorted(CONFIGS), default=None)
    p.add_argument("--json", type=Path, default=ROOT / "out" / "against_04.json")
    p.add_argument("--md", type=Path, default=ROOT / "out" / "against_04.md")
    p.add_argument("--summarise", action="store_true", help="only rewrite --md from --json (no runs)")
    a = p.parse_args(argv)
    if a.summarise:
        report = json.loads(a.json.read_text())
        for entry in report["configs"].values():
            entry["summary"] = summary(entry["runs"])
        a.md.write_text(markdown(report))
        return 0
    if a.rounds < 2:
        p.error("--rounds: at least 2 (the noise is the spread over rounds)")
    trees = {"old": a.old.resolve(), "new": a.new.resolve()}
    for side, tree in trees.items():
        if not (tree / "rankdyn" / "__init__.py").is_file():
            p.error(f"--{side} {tree}: no rankdyn/ package there")
    report = {
        "cpu": _cpu_model(),
        "rounds": a.rounds,
        "old_label": a.old_label,
        "new_label": _label(trees["new"]),
    }
    report["configs"] = {}
    a.json.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="against_04_"))
    for name in a.only or CONFIGS:
        entry = report["configs"][name] = {"args": CONFIGS[name], "runs": {"old": [], "new": []}}
        for r in range(a.rounds):
            for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
                row = run_once(trees[side], CONFIGS[name], work, old=side == "old" and not a.same_flags)
                entry["runs"][side].append(row)
                print(
                    f"{name:18s} round {r} {side}: {row['wall_s']:7.1f} s wall {row['cpu_s']:7.1f} CPU s "
                    f"run_s {row.get('run_s', '-')} rc {row['rc']} load {row['load_before']}",
                    flush=True,
                )
            entry["summary"] = summary(entry["runs"])
            a.json.write_text(json.dumps(report, indent=1) + "\n")
            a.md.write_text(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
