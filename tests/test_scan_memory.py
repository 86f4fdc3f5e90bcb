"""The depth scan's memory: flat in depth (the statistics fold inside the scan)."""

import os
import subprocess
import sys

import pytest
from helpers import own_compiles

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_DEPTH_RUN = """
import jax, rankdyn as rd
layer = rd.make_layer(jax.random.PRNGKey(0), n=3, d=2, mask="causal")
x0 = rd.initial_tokens(jax.random.PRNGKey(1), "sphere", 3, 2, batch=4096)
r = rd.simulate(layer, x0, {layers}, chunk=4096, metrics="mu")
jax.block_until_ready(r.summary.mean)
"""


def _peak_mib(layers: int) -> float:
    """Peak resident memory (MiB) of a fresh process running ``layers`` layers (ru_maxrss of
    the child alone: a counter of pages, not of time, so the load does not move it)."""
    code = (
        "import resource, sys\n"
        + _DEPTH_RUN.format(layers=layers)
        + "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    # Both runs compile (no shared cache): a program loaded from the cache would lower one peak.
    env = own_compiles(dict(os.environ, PYTHONPATH=ROOT, RANKDYN_CHUNK_TUNING="0", JAX_PLATFORMS="cpu"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 1024


@pytest.mark.slow
def test_simulate_memory_is_flat_in_depth():
    """Streaming statistics of 4096 trajectories: the peak at 3000 layers is within 1.1x of the
    peak at 300. The depth scan used to return every trajectory's values at every saved layer,
    folded afterwards (1.55x here at 6000 layers; 12x, 6342 MiB, for the CLI's default metrics
    at 10,000 layers); it now folds them in batch order inside the scan, a bounded group of
    saved layers at a time. The same bits come out (``tests/test_chunk_invariance.py``)."""
    short, deep = _peak_mib(300), _peak_mib(3000)
    assert deep <= 1.1 * short, (short, deep)
