"""Issue 54, item 1: simulate's peak memory over depth, and the depth pieces that keep it flat.

The peak of a deep run grew with its depth through what is held per saved layer on the host (the
JSON text of ``metrics.json``, now streamed into the file) and through one more compiled program
for a shorter last depth piece (`rankdyn._run._sizing.even_piece`). Pieces never change a number.
"""

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.random as jr
import numpy as np
import pytest
from helpers import own_compiles

import rankdyn as rd

ROOT = Path(__file__).resolve().parents[1]


def test_depth_pieces_give_the_same_bits_as_one_piece(monkeypatch):
    """12 layers in one piece, in pieces of 4 (an even cut: `even_piece` of 5), and with a
    progress bar: the statistics are the same bits."""
    from rankdyn._run import _fold, _sizing
    from rankdyn._run._simulate import simulate

    layer = rd.make_layer(jr.key(0), n=4, d=4, mask="causal", placement="post", value="orthogonal", qk="bert")
    x0 = rd.initial_tokens(jr.key(1), "sphere", 4, 4, batch=8)
    whole = simulate(layer, x0, 12, metrics="mu,min_cos,stable_rank", progress=False)
    pieces = []
    real = _sizing.even_piece
    monkeypatch.setattr(_sizing, "CPU_FLOPS", 1.0)  # every layer "takes" hours: the depth is cut
    monkeypatch.setattr(
        _sizing, "even_piece", lambda blocks, longest: pieces.append(real(blocks, 5)) or pieces[-1]
    )
    cut = simulate(layer, x0, 12, metrics="mu,min_cos,stable_rank", progress=False)
    assert pieces == [4], pieces
    # Fold groups cut too: room for 5 records of the chunk (even_piece: groups of 4, or 3 in pieces of 4).
    monkeypatch.undo()
    monkeypatch.setitem(_fold.FOLD_BYTES, jax.default_backend(), 5 * 8 * (4 * 4 + 1))
    grouped = simulate(layer, x0, 12, metrics="mu,min_cos,stable_rank", progress=False)
    for other in (cut, grouped):
        for a, b in zip(whole.summary.to_dict().values(), other.summary.to_dict().values()):
            for stat in a:
                np.testing.assert_array_equal(a[stat], b[stat])


#: The issue's command (n = d = 16, causal, post-LN, orthogonal W_V, BERT-like W_Q W_K) at a batch
#: of 16: what grows with the depth (the records per saved layer) does not depend on the batch, and
#: weighs more against a smaller run (1024 trajectories add tens of MiB to both depths); a growth
#: per trajectory and layer (float32 states kept on the host) would be 156 MiB at 10,000 layers.
SIMULATE = (
    "simulate --mask causal --n 16 --d 16 --batch 16 --placement post --value orthogonal --qk bert "
    "--no-progress --devices 1"
).split()
#: Peak RSS of the child, read in a fresh parent: ru_maxrss keeps, across exec, the peak of the
#: process it was forked from (a test worker of several GB), so the child's own would read that.
_PEAK = """
import resource, subprocess, sys
res = subprocess.run(sys.argv[1:], capture_output=True, text=True)
sys.stderr.write(res.stderr[-2000:])
print(res.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def peak_rss(argv, env, timeout=900) -> int:
    """Peak RSS in bytes of ``python -m rankdyn argv``, alone in a fresh parent."""
    cmd = [sys.executable, "-m", "rankdyn", *argv]
    res = subprocess.run(
        [sys.executable, "-c", _PEAK, *cmd], env=env, capture_output=True, text=True, timeout=timeout
    )
    code, kib = res.stdout.split()
    assert code == "0", res.stderr[-2000:]
    return int(kib) * 1024


@pytest.mark.slow
def test_peak_memory_over_depth_is_flat(tmp_path):
    """Peak RSS at 10,000 layers within 1.10x of that at 128 (it was 1.21x for 1024
    trajectories: benchmarks/README.md, "Peak memory over depth"). Each run compiles its own
    programs, as a user's first run does."""
    env = own_compiles(dict(os.environ, PYTHONPATH=str(ROOT), JAX_ENABLE_X64="0"))
    peaks = {
        depth: peak_rss([*SIMULATE, "--num-layers", str(depth), "--out", str(tmp_path / str(depth))], env)
        for depth in (128, 10_000)
    }
    assert peaks[10_000] <= 1.10 * peaks[128], {k: v / 2**20 for k, v in peaks.items()}
