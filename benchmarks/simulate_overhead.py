"""The share of compile + run in a ``rankdyn simulate`` process (aim: at least 80% from n = 2048).

    python benchmarks/simulate_overhead.py [--n 2048,4096] [--rounds 2] [--tree TAG=PATH ...]

Runs ``python -m rankdyn simulate --mask causal --n N --d 64 --num-layers 16 --batch 8 --heads 1
--metrics mu`` in fresh processes (what a user's shell does). Wall is the process from start to
exit; compile and run are what the run's ``metrics.json`` records (``timing``); "rest" is wall
minus both: imports, the weight draw, the figure, start and shutdown. With several ``--tree``
(e.g. ``--tree before=/tmp/old --tree after=$PWD``) each tree's copy of rankdyn is put first on
``PYTHONPATH`` and the trees run alternately, back to back, so each pair meets the same load;
the load average is printed with each row. The depth flag is ``--num-layers``; for a tree from
before its rename pass ``--layers-flag=--layers``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(tree: Path, n: int, layers_flag: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "rankdyn", "simulate", "--mask", "causal", "--n", str(n), "--d", "64"]
        cmd += [layers_flag, "16", "--batch", "8", "--heads", "1", "--metrics", "mu"]
        cmd += ["--out", str(out), "--no-progress"]
        env = os.environ | {"PYTHONPATH": str(tree)}
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp)
        wall = time.perf_counter() - t0
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
        timing = json.loads((out / "metrics.json").read_text())["timing"]
    busy = timing["compile_s"] + timing["run_s"]
    return dict(load=load, compile=timing["compile_s"], run=timing["run_s"], wall=wall, share=busy / wall)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="2048,4096", help="token counts, comma-separated")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--tree", action="append", default=None, metavar="TAG=PATH", help="a rankdyn tree")
    p.add_argument("--layers-flag", default="--num-layers")
    args = p.parse_args()
    trees = [t.split("=", 1) for t in (args.tree or [f"this={ROOT}"])]
    print("tree     n     load  compile    run   wall  share   rest")
    for _ in range(args.rounds):
        for n in (int(x) for x in args.n.split(",")):
            for tag, path in trees:
                r = run_once(Path(path), n, args.layers_flag)
                rest = r["wall"] - r["compile"] - r["run"]
                print(
                    f"{tag:8s} {n:5d} {r['load']:5.2f} {r['compile']:7.2f}s {r['run']:5.2f}s "
                    f"{r['wall']:5.2f}s {100 * r['share']:5.1f}% {rest:5.2f}s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
