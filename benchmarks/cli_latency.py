"""First contact: how fast ``rankdyn --help``, ``rankdyn simulate --help`` and refusals answer.

    PYTHONPATH=$PWD python benchmarks/cli_latency.py [--json OUT] [--quick] [--repeats N]

Each command runs in a fresh ``python -m rankdyn`` process (what a user's shell does), several
times; the table gives the min and median wall time and process CPU time (the child's user +
system seconds), the exit code, and whether JAX was imported (read from ``-X importtime`` on
one extra run). The target (issue 34) is an answer in under 0.5 s for ``--help`` and for every
refusal that needs no JAX, and under 2 s for the pre-load token check of a checkpoint run (a
``--batch`` larger than the text's excerpts, refused before the weights load).

The wall time depends on the load of a shared machine: the load average is recorded with each
row, and the CPU time is the steadier figure.
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


def _commands(tmp: Path) -> dict[str, list[str]]:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = [f"w{i}" for i in range(40)]
    text = tmp / "short.txt"
    text.write_text(" ".join(words))  # 40 tokens: 2 excerpts of n = 16 (14 text tokens), 64 asked for
    # A BERT's config and tokenizer, and weights that are not a safetensors file: a refusal about
    # the text (not about the weights) shows it came before the weights load.
    ckpt = tmp / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps({"model_type": "bert", "max_position_embeddings": 64}))
    (ckpt / "model.safetensors").write_bytes(b"not weights")
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2} | {w: i + 3 for i, w in enumerate(words)}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.save(str(ckpt / "tokenizer.json"))
    bad = tmp / "bad.toml"  # a sweep whose [axes] names a mask that does not exist
    bad.write_text('[axes]\nmask = ["complete", "no-such-mask"]\n[fixed]\nn = 4\n')
    return {
        "rankdyn --help": ["--help"],
        "rankdyn simulate --help": ["simulate", "--help"],
        "rankdyn reproduce --help": ["reproduce", "--help"],
        "simulate --num-layers -1 (refused)": ["simulate", "--num-layers", "-1"],
        "simulate --out /proc/x (refused)": ["simulate", "--out", "/proc/x/y"],
        "equilibria --n 0 (refused)": ["equilibria", "--n", "0"],
        "reproduce no-such-target (refused)": ["reproduce", "no-such-target"],
        "simulate --x64 --n 0 (refused)": ["simulate", "--x64", "--n", "0"],
        "sweep bad mask in the config (refused)": ["sweep", str(bad), "--out", str(tmp / "sweep")],
        "lyapunov --qr-every 0 (refused)": ["lyapunov", "--num-layers", "4", "--qr-every", "0"],
        "simulate --checkpoint --batch 64 short text (refused)": [
            "simulate",
            "--checkpoint",
            str(ckpt),
            "--text",
            str(text),
            "--batch",
            "64",
            "--n",
            "16",
        ],  # fmt: skip
    }


def _child(args: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of one ``python -m rankdyn ARGS`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    rc = subprocess.run(
        [sys.executable, "-m", "rankdyn", *args], env=env, capture_output=True, cwd=ROOT
    ).returncode
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc


def _imports_jax(args: list[str], env: dict) -> bool:
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rankdyn", *args], env=env, capture_output=True, cwd=ROOT
    )
    return any(line.rstrip().endswith("| jax") for line in res.stderr.decode().splitlines())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None, help="write the rows here")
    ap.add_argument("--quick", action="store_true", help="3 runs per command (default 7)")
    ap.add_argument("--repeats", type=int, default=None)
    a = ap.parse_args()
    repeats = a.repeats or (3 if a.quick else 7)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, args in _commands(Path(tmp)).items():
            load = os.getloadavg()[0]
            runs = [_child(args, env) for _ in range(repeats)]
            walls, cpus, rcs = zip(*runs)
            rows.append({
                "command": label, "argv": args, "exit_code": rcs[0], "imports_jax": _imports_jax(args, env),
                "wall_min_s": min(walls), "wall_median_s": statistics.median(walls),
                "cpu_min_s": min(cpus), "cpu_median_s": statistics.median(cpus),
                "repeats": repeats, "load_before": load,
            })  # fmt: skip
            r = rows[-1]
            print(
                f"{label:<56} rc {r['exit_code']}  wall min {r['wall_min_s']:.2f} s  median "
                f"{r['wall_median_s']:.2f} s  cpu min {r['cpu_min_s']:.2f} s  median "
                f"{r['cpu_median_s']:.2f} s"
                f"  jax {'yes' if r['imports_jax'] else 'no'}  (load {load:.1f})",
                flush=True,
            )
    if a.json is not None:
        a.json.write_text(json.dumps({"rows": rows, "cores": os.cpu_count()}, indent=1))
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
