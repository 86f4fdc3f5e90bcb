"""`rankdyn lyapunov`'s refusals: a batch that cannot fit, and a bad ``--k`` or ``--out`` before JAX loads."""

import os
import subprocess
import sys

from rankdyn.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_lyapunov_refuses_a_batch_that_cannot_fit_before_drawing_its_starts(tmp_path, capsys, monkeypatch):
    """The memory check comes before the starting tokens are drawn and names their bytes, so a
    batch that cannot fit is refused rather than killed by the kernel. Here the host has 64 MiB
    and the starts 3.1 GiB (n d = 2048, float64 in the tests, the draw and its copies)."""
    from rankdyn._model import _tokens
    from rankdyn._run import _memory

    monkeypatch.setattr(_memory, "host_available", lambda: 64 * 2**20)

    def drawn(*args, **kwargs):
        raise AssertionError("the starting tokens were drawn before the memory check")

    monkeypatch.setattr(_tokens, "initial_tokens", drawn)
    code = main(["lyapunov", "--batch", "50000", "--num-layers", "4", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "(starting tokens: 3.1 GiB)" in err and "lower --batch" in err, err
    assert not (tmp_path / "o").exists()
    # --d 1 (the spheres S^0) talked about the default --k 0; it names --d.
    assert main(["lyapunov", "--d", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rankdyn lyapunov: error: --d 1:") and "--k" not in err, err


def test_lyapunov_k_and_out_refused_before_jax(tmp_path):
    """``--k 0``, a ``--k`` above n d and ``--out FILE`` are refused before JAX is imported, so
    before the layer is built. (``--d 1``: in the Lyapunov memory test.)"""
    afile = tmp_path / "afile"
    afile.write_text("x")
    code = f"""
import sys
from rankdyn.cli import main
out = {str(tmp_path / "o")!r}
for argv in (["--k", "0"], ["--k", "99999"], ["--out", {str(afile)!r}]):
    args = ["lyapunov", "--out", out, *argv] if argv[0] != "--out" else ["lyapunov", *argv]
    assert main(args) == 2, argv
print("jax loaded:", "jax" in sys.modules)
"""
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "jax loaded: False" in res.stdout, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 3 and all(": error: " in ln for ln in lines), res.stderr
    assert "--k 0: expected 1 <= k <=" in lines[0] and "--k 99999" in lines[1] and "existing file" in lines[2]
