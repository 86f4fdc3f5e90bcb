"""Faults, round 4 (issue 44): nothing wrong, nothing lost on the continuation, Lyapunov, sweep
and reproduce surfaces.

One test (or a few) per class of the audit: memory that grows with depth, results kept from a
run with other flags, a chunk file trusted by its name, memory refused before allocation.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- Memory flat in depth ---------------------------------------------------------------------

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
    env = dict(os.environ, PYTHONPATH=ROOT, RANKDYN_CHUNK_TUNING="0", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1]) / 1024


@pytest.mark.slow
def test_simulate_memory_is_flat_in_depth():
    """Streaming statistics of 4096 trajectories: the peak at 3000 layers is within 1.1x of the
    peak at 300. The depth scan used to return every trajectory's values at every saved layer,
    folded afterwards (1.55x here at 6000 layers; 12x, 6342 MiB, for the CLI's default metrics
    at 10,000 layers); it now folds them in batch order inside the scan, a bounded group of
    saved layers at a time. The same bits come out (``tests/test_faults_bitwise.py``)."""
    short, deep = _peak_mib(300), _peak_mib(3000)
    assert deep <= 1.1 * short, (short, deep)


# --- A chunk file is placed by the cells it holds ----------------------------------------------

_TWO_CHUNKS = """
name = "two"
[axes]
dqk = [0.25, 4.0]
[fixed]
mask = "causal"
n = 3
d = 2
layers = 2
batch = 2
save_every = 1
[observe]
per_layer = ["mu"]
final = ["mu"]
[run]
chunk_trajectories = 2
"""


@pytest.mark.slow
def test_assemble_and_resume_check_each_chunks_cells_against_the_plan(tmp_path, capsys):
    """A copy of chunk 0 saved as chunk 1 used to give a sweep.nc with cell 1 all NaN, exit 0;
    ``--assemble`` now refuses it naming the cells the file holds, ``--resume`` recomputes it,
    and a truncated chunk is called damaged, not missing."""
    import shutil

    import numpy as np
    import xarray as xr

    from rankdyn._sweep._assemble import NETCDF_ENGINE
    from rankdyn.cli import main

    config, out = tmp_path / "two.toml", tmp_path / "out"
    config.write_text(_TWO_CHUNKS)
    base = ["sweep", str(config), "--out", str(out), "--no-plots", "--no-progress"]
    assert main(base) == 0
    chunks = out / "chunks"
    shutil.copy(chunks / "chunk_00000.npz", chunks / "chunk_00001.npz")
    capsys.readouterr()
    assert main(["sweep", "--assemble", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "chunk_00001.npz: it holds cells [0], not this chunk's [1]" in err, err
    assert main(base + ["--resume"]) == 0
    assert "chunk_00001.npz: it holds cells [0]" in capsys.readouterr().err
    ds = xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load()
    assert np.isfinite(ds["mu"].values).all()
    data = (chunks / "chunk_00001.npz").read_bytes()
    (chunks / "chunk_00001.npz").write_bytes(data[: len(data) // 2])
    assert main(["sweep", "--assemble", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "missing or unusable" in err and "chunk_00001.npz: it is damaged" in err, err


# --- Memory refused before allocation ----------------------------------------------------------


def test_lyapunov_refuses_a_batch_that_cannot_fit_before_drawing_its_starts(tmp_path, capsys, monkeypatch):
    """``lyapunov --batch 100000000`` drew its starting tokens before the memory check and was
    killed by the kernel at 16 GB; the check now comes first and names the starting tokens'
    bytes. Here the host has 64 MiB and the starts 1.5 GiB (n d = 2048, float64 in the tests)."""
    from rankdyn._model import _tokens
    from rankdyn._run import _memory
    from rankdyn.cli import main

    monkeypatch.setattr(_memory, "_host_available", lambda: 64 * 2**20)

    def drawn(*args, **kwargs):
        raise AssertionError("the starting tokens were drawn before the memory check")

    monkeypatch.setattr(_tokens, "initial_tokens", drawn)
    code = main(["lyapunov", "--batch", "50000", "--layers", "4", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "(starting tokens: 1.5 GiB)" in err and "lower --batch" in err, err
    assert not (tmp_path / "o").exists()
    # --d 1 (the spheres S^0) talked about the default --k 0; it names --d.
    assert main(["lyapunov", "--d", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rankdyn lyapunov: error: --d 1:") and "--k" not in err, err


def test_flow_refuses_saves_that_cannot_fit_before_compute(tmp_path, capsys):
    """``flow --saves 10000000``: refused naming the bytes, before any token is drawn."""
    from rankdyn.cli import main

    code = main(["flow", "--saves", "10000000", "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--saves 10000000 needs about" in err and "TiB" in err, err


# --- reproduce --resume keeps only results computed with this run's flags ----------------------


def test_reproduce_resume_recomputes_a_target_computed_with_other_flags(tmp_path, capsys, monkeypatch):
    """``temperature --x64`` and then a float32 ``depth-table`` into one folder: ``--resume``
    kept the float64 temperature.json in a float32 report (every run rewrites the folder's
    record of its flags). Each target now records its own flags (``run_flags``) and a target
    computed with other ones is recomputed, named with the flag. The targets are stand-ins
    (`run_target` patched): this is about what is kept, not about the physics."""
    import jax

    import rankdyn._reproduce as rp
    from rankdyn.cli import main

    ran = []

    def fake(spec, out, quick, seed, cache, checkpoint):
        ran.append(spec.name)
        return {
            "name": spec.name,
            "claim": "c",
            "setting": {"quick": quick, "seed": seed},
            "measured": {},
            "verdict": "reproduced",
            "criterion": "x",
            "figures": [],
            "notes": "",
        }

    monkeypatch.setattr(rp, "run_target", fake)
    out = tmp_path / "o"
    base = ["reproduce", "--quick", "--jobs", "1", "--no-progress", "--out", str(out)]
    assert main([*base, "temperature", "depth-table"]) == 0  # the tests run with x64 on
    assert rp.run_flags(True, 0)["x64"] and '"x64": true' in (out / "temperature.json").read_text()
    jax.config.update("jax_enable_x64", False)  # as a run without --x64
    try:
        assert main([*base, "depth-table"]) == 0  # float32 now: the folder's record says so
        capsys.readouterr()
        ran.clear()
        assert main([*base, "temperature", "depth-table", "--resume"]) == 0
    finally:
        jax.config.update("jax_enable_x64", True)
    stdout = capsys.readouterr().out
    assert ran == ["temperature"], stdout
    assert "recomputing temperature: it was computed with other flags (--x64 True there, False now)" in stdout


# --- Ctrl-C and SIGTERM stop at the next boundary ----------------------------------------------


@pytest.mark.slow
def test_lyapunov_stops_at_the_next_chunk_after_a_signal(tmp_path, capsys, monkeypatch):
    """A SIGTERM that arrives during the first chunk (set as the handler sets it, so no timing is
    involved) stops the run before the second chunk: exit 143, one line, nothing written. It
    used to run every chunk to the end first."""
    import signal

    from rankdyn._lyapunov import _qr
    from rankdyn._run import _interrupt
    from rankdyn.cli import main

    real, calls = _qr._advance, []

    def advance(*args):
        calls.append(1)
        out = real(*args)
        _interrupt._state["signum"] = signal.SIGTERM  # "arrived" during this piece
        return out

    monkeypatch.setattr(_qr, "_advance", advance)
    argv = ["lyapunov", "--n", "3", "--d", "2", "--layers", "4", "--batch", "6", "--chunk", "2"]
    try:
        code = main([*argv, "--k", "2", "--no-progress", "--out", str(tmp_path / "o")])
    finally:
        _interrupt._state["signum"] = None
    err = capsys.readouterr().err
    assert code == 143 and len(calls) == 1, (code, calls, err)
    assert "rankdyn lyapunov: interrupted; nothing was saved" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "lyapunov.json").exists()


# --- Refusals before JAX loads, and their causes -----------------------------------------------


def test_lyapunov_k_and_out_refused_before_jax(tmp_path):
    """``--k 0``, a ``--k`` above n d and ``--out FILE`` were refused after the layer was built (50
    XLA compiles); now before JAX is imported. (``--d 1``: in the Lyapunov memory test.)"""
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


# --- Tracebacks --------------------------------------------------------------------------------


def test_continue_accepts_every_param_it_lists():
    """``continue --param qk_std | value_std | ln_radius`` (3 of the 5 choices it lists) was an
    internal error: those parameters have no flag of their own, and the check read one. The
    flags are checked (no compute) and the model at --from reads the parameter."""
    from rankdyn._commands import continuation
    from rankdyn.cli import build_parser

    for name, extra in (
        ("qk_std", ["--qk", "gaussian"]),
        ("value_std", ["--value", "gaussian"]),
        ("ln_radius", []),
    ):
        argv = ["continue", "--param", name, "--from", "0.5", "--to", "1", "--n", "2", "--d", "2", *extra]
        args = build_parser().parse_args([*argv, "--out", "unused"])
        config = continuation._check(args)
        assert getattr(args, name) == 0.5 and config is not None, name


# --- Precision -------------------------------------------------------------------------------


def test_lyapunov_spectrum_refuses_zero_tokens_under_the_sphere_layernorm():
    """All-zero starting tokens gave finite exponents with nothing flagged: x/|x| is undefined
    there. They are refused, naming the first zero token; a nonzero start is still accepted by
    the same check (the control runs no spectrum: ``k`` 0 is refused after it)."""
    import jax
    import jax.numpy as jnp

    import rankdyn as rd
    from rankdyn._errors import UsageError
    from rankdyn.lyapunov import lyapunov_spectrum

    layer = rd.make_layer(jax.random.PRNGKey(0), n=3, d=2, mask="causal")
    x0 = jnp.ones((2, 3, 2)).at[1, 2].set(0.0)
    with pytest.raises(UsageError, match=r"1 zero token\(s\) \(first: trajectory 1, token 2\)"):
        lyapunov_spectrum(layer, x0, 4, k=2, key=jax.random.key(0))
    with pytest.raises(UsageError, match="k"):
        lyapunov_spectrum(layer, jnp.ones((2, 3, 2)), 4, k=0, key=jax.random.key(0))


def test_checkpoints_lists_names_without_loading_jax():
    """``rankdyn checkpoints`` took 12 s to print three names: listing them imported JAX (through
    the checkpoint package's eager imports). It imports none now."""
    code = "import sys; from rankdyn.cli import main; main(['checkpoints']); "
    code += "print('jax:', 'jax' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "jax: False" in res.stdout, res.stdout + res.stderr
    assert "rankdyn simulate --checkpoint NAME" in res.stdout
