"""Faults: no unflagged wrong numbers, nothing half-written, resume past damage, exit codes.

One row per class of the fault audit: underflow and zero tokens, ranks of NaN matrices,
bad ``rank_tol``, softmax overflow, Python-API arguments, file modes and atomic writes, a full
disk (ENOSPC injected into the writer, and a real small tmpfs where mounting is allowed),
damaged sweep chunks and manifests, the sweep's memory check, exit codes 1/2/130, and Ctrl-C
during the sweep's compile in a subprocess.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
import zipfile

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import xarray as xr
from helpers import SIGINT_DEFAULT, own_compiles

import rankdyn as rd
from rankdyn._run import _io
from rankdyn.cli import main
from rankdyn.sweep import NETCDF_ENGINE

#: `collapse_metrics` as one compiled program, as simulate runs it (op by op, each of its
#: operations compiled a program of its own).
_collapse_metrics = eqx.filter_jit(rd.metrics.collapse_metrics)

UNDERFLOW = dict(n=8, d=8, mask="complete", placement="none", value="scaled", mlp=True)


def _umask_mode():
    m = os.umask(0)
    os.umask(m)
    return 0o666 & ~m


def _temp_files(folder):
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


# --- Wrong numbers with no flag ---------------------------------------------------------------


@pytest.mark.slow
def test_zero_tokens_have_nan_directions_and_are_flagged(getkey):
    """float64 underflow under norm none: from some depth every token is exactly 0. The states
    (checked with NumPy) decide: a zero row means NaN cosines, counted as degenerate, never a
    min_cos of 0; layers before it agree with NumPy's cosines."""
    layer = rd.make_layer(getkey(), **UNDERFLOW)
    x0 = np.asarray(jr.normal(getkey(), (2, 8, 8))) * 1e-250  # tiny tokens: underflow within ~60 layers
    traj = rd.simulate(layer, x0, 120, save_every=20, metrics="mu,min_cos", save_states=True)
    states = np.asarray(traj.states)
    zero = np.all(states == 0, axis=-1).any(axis=-1)  # (batch, saved): a token is exactly 0
    assert zero[:, -1].all() and not zero[:, 0].any()
    assert int(traj.summary.degenerate) == 2 and int(traj.summary.nonfinite) == 0
    cos = np.asarray(traj.metrics["min_cos"])
    assert np.all(np.isnan(cos[zero]))
    with np.errstate(invalid="ignore", divide="ignore"):
        big = np.max(np.abs(states), axis=(-2, -1), keepdims=True)
        s = states / big  # NumPy's norm of 1e-250 tokens would underflow: rescale first
        u = s / np.linalg.norm(s, axis=-1, keepdims=True)
    ref = np.min(np.einsum("bsnd,bsmd->bsnm", u, u), axis=(-2, -1))
    np.testing.assert_allclose(cos[~zero], ref[~zero], rtol=1e-12, atol=1e-12)
    mean = np.asarray(traj.summary.mean["min_cos"])
    assert np.isnan(mean[-1])  # every trajectory has a zero token: no statistic, not 0


@pytest.mark.slow  # end to end: `rankdyn simulate`, 300 layers
def test_cli_counts_underflow_writes_readable_files_and_no_temp(tmp_path, capsys):
    out = tmp_path / "u"
    argv = "simulate --n 8 --d 8 --num-layers 300 --save-every 30 --batch 2 --placement none --value scaled "
    argv += "--mask complete --mlp --metrics mu,min_cos --per-trajectory --no-progress --x64 --out"
    assert main(argv.split() + [str(out)]) == 0
    data = json.loads((out / "metrics.json").read_text())
    assert data["flags"]["underflow"] == 2 and data["flags"]["degenerate_ln"] == 0
    assert data["metrics"]["min_cos"]["mean"][-1] is None  # NaN in JSON, never 0
    assert "underflow=2 of 2" in capsys.readouterr().out
    with np.load(out / "per_trajectory.npz") as z:
        assert np.isnan(z["min_cos"][:, -1]).all() and np.isfinite(z["min_cos"][:, 0]).all()
    for name in ("metrics.json", "mu.png", "per_trajectory.npz"):
        assert (out / name).stat().st_mode & 0o777 == _umask_mode(), name
    assert _temp_files(out) == []


def test_nan_matrices_have_nan_ranks():
    m = _collapse_metrics(np.full((4, 3), np.nan), 1e-6)
    for name in ("num_rank", "eff_rank", "stable_rank", "sigma_ratio"):
        assert np.isnan(float(m[name])), name
    z = _collapse_metrics(np.zeros((4, 3)), 1e-6)  # a zero matrix: rank 0, no direction
    assert float(z["num_rank"]) == 0.0 and np.isnan(float(z["min_cos"]))


@pytest.mark.parametrize("tol", [float("nan"), -1.0, 0.0, 1.0])
def test_bad_rank_tol_is_refused(getkey, tol):
    layer = rd.make_layer(getkey(), n=3, d=3)
    with pytest.raises(ValueError, match="rank_tol"):
        rd.simulate(layer, jnp.eye(3), 2, rank_tol=tol)


def test_cli_rank_tol_above_one_is_refused(tmp_path, capsys):
    assert main(["simulate", "--rank-tol", "2", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--rank-tol" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "kw, limit",
    [(dict(qk="gaussian", qk_std=1e20), "logits can reach"), (dict(dqk=1e-45), "smallest normal")],
)
def test_softmax_overflow_is_refused_before_compute(getkey, kw, limit):
    """float32 logits of 1e40 (or 1/sqrt(dqk) of a flushed subnormal) are inf: all-NaN runs."""
    layer = rd.make_layer(getkey(), n=4, d=4, **kw)
    x0 = jnp.asarray(np.eye(4), jnp.float32)
    layer = jax.tree.map(
        lambda v: v.astype(jnp.float32) if jnp.issubdtype(v.dtype, jnp.floating) else v, layer
    )
    with pytest.raises(ValueError, match=limit):
        rd.simulate(layer, x0, 2, metrics="mu")


# --- Python API arguments ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(x0=jnp.eye(3, dtype=jnp.float16)), "x0"),
        (dict(x0=jnp.eye(3, dtype=jnp.bfloat16)), "x0"),
        (dict(save_every=True), "save_every"),
        (dict(devices="bogus"), "devices"),
        (dict(observe=lambda t, x, args: x.sum(0)), "observe must return a dict"),
    ],
)
def test_api_arguments_named(getkey, kw, name):
    layer = rd.make_layer(getkey(), n=3, d=3)
    kw = {"x0": jnp.eye(3)} | kw
    with pytest.raises(ValueError, match=name):
        rd.simulate(layer, kw.pop("x0"), 2, **kw)


# --- Files: atomic, umask, full disk -----------------------------------------------------------


def test_write_json_follows_umask_and_is_atomic(tmp_path, monkeypatch):
    old = os.umask(0o027)
    try:
        path = _io.write_json(tmp_path / "a.json", {"x": 1})
        assert path.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)

    def full(f, **arrays):  # a writer that gets half-way, then finds the disk full
        f.write(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_io.np, "savez", full)
    with pytest.raises(rd._errors.UsageError, match="No space left on device"):
        _io.savez(tmp_path / "a.json", {"x": np.zeros(3)})  # over a complete file
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}  # what was complete stays
    assert _temp_files(tmp_path) == []


@pytest.mark.slow
def test_cli_simulate_full_disk_is_one_error_line(tmp_path, monkeypatch, capsys):
    def full(f, **arrays):
        f.write(b"PK\x03\x04")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(_io.np, "savez", full)
    out = tmp_path / "o"
    argv = ["simulate", "--n", "3", "--d", "3", "--num-layers", "2", "--batch", "2", "--metrics", "mu"]
    assert main(argv + ["--per-trajectory", "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "per_trajectory.npz" in err and "Traceback" not in err
    assert not (out / "per_trajectory.npz").exists() and _temp_files(out) == []


def test_real_full_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    except OSError as err:  # no mount command
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        _io.write_json(mnt / "small.json", {"ok": True})
        with pytest.raises(rd._errors.UsageError, match="No space left"):
            _io.write_json(mnt / "big.json", {"x": list(range(100_000))})
        assert sorted(p.name for p in mnt.iterdir()) == ["small.json"]
        assert json.loads((mnt / "small.json").read_text()) == {"ok": True}
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# --- Sweeps: damaged chunks and manifests, full disk, memory -----------------------------------

SWEEP = """
name = "faults"
[axes]
seed = [0, 1, 2]
[fixed]
n = 3
d = 3
num_layers = 4
batch = 2
[observe]
per_layer = ["mu"]
final = ["mu", "num_rank"]
[run]
chunk = 2
"""


def _sweep(tmp_path, text=SWEEP):
    cfg = tmp_path / "s.toml"
    cfg.write_text(text)
    return cfg


@pytest.mark.slow  # end to end: `rankdyn sweep`, a full disk, then a resume
def test_sweep_full_disk_then_resume_past_damaged_chunks(tmp_path, monkeypatch, capsys):
    from rankdyn._sweep import _store

    cfg, out = _sweep(tmp_path), tmp_path / "out"
    argv = ["sweep", str(cfg), "--out", str(out), "--no-plots", "--no-progress", "--devices", "1"]
    real = _io.np.savez
    calls = []

    def full_on_second(f, **arrays):
        calls.append(1)
        if len(calls) == 2:
            f.write(b"PK\x03\x04")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(f, **arrays)

    monkeypatch.setattr(_io.np, "savez", full_on_second)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "chunk_00001.npz" in err and "No space left" in err
    assert sorted(p.name for p in (out / "chunks").iterdir()) == ["chunk_00000.npz"]
    assert _temp_files(out) == []
    monkeypatch.setattr(_io.np, "savez", real)
    assert main(argv + ["--resume"]) == 0
    ref = xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load()

    chunks = sorted((out / "chunks").iterdir())
    raw = chunks[0].read_bytes()
    chunks[0].write_bytes(raw[: len(raw) // 2])  # truncated
    chunks[1].write_bytes(b"")  # empty
    raw = bytearray(chunks[2].read_bytes())
    with zipfile.ZipFile(chunks[2]) as z:
        info = z.getinfo("final/mu.npy")
    raw[info.header_offset + 30 + len(info.filename) + 100] ^= 0xFF  # a data byte: bad CRC
    chunks[2].write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(argv + ["--resume"]) == 0
    io = capsys.readouterr()
    assert io.err.count("recomputing this chunk") == 3 and "computed 3 chunk(s)" in io.out
    xr.testing.assert_identical(xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load(), ref)

    manifest = out / "manifest.json"
    manifest.write_text(manifest.read_text()[:50])  # truncated manifest
    assert main(argv + ["--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "manifest.json" in err and "delete the folder" in err.lower()

    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / ".manifest.json.x1y2.tmp").write_text('{"config')
    assert main(["sweep", str(cfg), "--out", str(stray), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert ".manifest.json.x1y2.tmp" in err and "delete the folder" in err
    assert _store  # the store module is the one writing the chunks


@pytest.mark.slow
def test_sweep_nan_cells_have_nan_rank_and_rate(tmp_path):
    text = SWEEP.replace("seed = [0, 1, 2]", "qk_std = [1.0, 1e200]").replace(
        "n = 3", 'qk = "gaussian"\nn = 3'
    )
    ds = rd.run_sweep(rd.load_sweep_config(text), tmp_path / "o", progress=False)
    fine, nan = ds.sel(qk_std=1.0), ds.sel(qk_std=1e200)  # 1e200^2: float64 logits overflow
    assert int(nan["nonfinite"]) == 2 and int(fine["nonfinite"]) == 0
    assert np.isnan(nan["final_num_rank"].values).all() and np.isnan(float(nan["mu_rate"]))
    assert np.isfinite(fine["final_num_rank"].values).all() and np.isfinite(float(fine["mu_rate"]))


def test_sweep_memory_checked_before_compute(tmp_path, capsys):
    cfg = _sweep(tmp_path, SWEEP.replace("batch = 2", "batch = 16777216").replace("n = 3", "n = 32"))
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "GiB" in err and "batch" in err
    assert not (tmp_path / "o").exists()


def test_huge_grid_refused_with_estimate_before_checking_cells(tmp_path, capsys):
    """10^7 cells of the default depth and batch: ~650 GiB of dataset, refused from the axes
    alone (checking the cells first took about 28 minutes)."""
    seed, mask_seed = ", ".join(map(str, range(10**4))), ", ".join(map(str, range(10**3)))
    cfg = _sweep(tmp_path, f'name = "huge"\n[axes]\nseed = [{seed}]\nmask_seed = [{mask_seed}]\n')
    assert main(["sweep", str(cfg), "--out", str(tmp_path / "o"), "--max-cells", str(10**7)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "a grid of 10000000 cells needs about" in err and "GiB" in err


# --- Exit codes and interrupts -----------------------------------------------------------------

SMALL = ["simulate", "--n", "3", "--d", "3", "--num-layers", "2", "--batch", "2", "--no-progress"]


@pytest.mark.parametrize(
    "exc, code, text",
    [
        (RuntimeError("boom"), 1, "internal error"),
        (ValueError("late"), 1, "internal error"),  # after the checks: a bug, not the user's
        (rd._errors.UsageError("fix me"), 2, "error: fix me"),
        (KeyboardInterrupt(), 130, "interrupted; nothing was saved"),
    ],
)
def test_exit_codes(tmp_path, monkeypatch, capsys, exc, code, text):
    def fail(*a, **k):
        raise exc

    monkeypatch.setattr(rd._run._simulate, "simulate", fail)
    assert main(SMALL + ["--out", str(tmp_path / "o")]) == code
    err = capsys.readouterr().err
    assert text in err
    assert ("Traceback" in err) == (code == 1)


def test_equilibria_interrupt(tmp_path, monkeypatch, capsys):
    from rankdyn import equilibria

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(equilibria, "equilibrium_census", stop)
    assert main(["equilibria", "--n", "2", "--d", "2", "--no-progress", "--out", str(tmp_path / "e")]) == 130
    err = capsys.readouterr().err
    assert "rankdyn equilibria: interrupted" in err and "Traceback" not in err


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_sigint_during_sweep_compile(tmp_path):
    """Ctrl-C while the sweep compiles: exit 130 and the resume line, never a crash (SIGSEGV)
    or a swallowed interrupt (a completed sweep). Three tries, each a fresh process."""
    cfg = _sweep(tmp_path, SWEEP.replace("num_layers = 4", "num_layers = 64").replace("n = 3", "n = 16"))
    for attempt in range(3):
        out = tmp_path / f"o{attempt}"
        start = SIGINT_DEFAULT + "import sys; from rankdyn.cli import main; sys.exit(main(sys.argv[1:]))"
        cmd = [sys.executable, "-c", start, "sweep", str(cfg), "--out", str(out), "--no-progress"]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
        proc = subprocess.Popen(cmd, env=own_compiles(), **pipes)  # the signal must meet a compile
        line = proc.stdout.readline()  # printed right before the chunks are built and compiled
        while line and "compiled group" not in line:
            line = proc.stdout.readline()
        time.sleep(0.2 * attempt)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 130, (attempt, proc.returncode, stderr[-2000:])
        assert "Traceback" not in stderr and "--resume" in stderr, stderr
        assert not (out / "sweep.nc").exists() and _temp_files(out) == []


def test_sweep_memory_follows_the_attention_path():
    """The sweep's estimate counted n x n scores on every path: a blocked long-context group was
    estimated (and could be refused) as if dense."""
    from rankdyn._sweep._plan import sweep_memory, sweep_plan

    def total(attention):
        text = SWEEP.replace("n = 3", "n = 8192").replace("batch = 2", "batch = 1")
        fixed = f'[fixed]\nmask = "window"\nwindow = 16\nattention = "{attention}"\n'
        text = text.replace("[fixed]\n", fixed)
        cfg = rd.load_sweep_config(text)
        return sweep_memory(cfg, sweep_plan(cfg), itemsize=4).total

    dense, blocked = total("dense"), total("blocked")
    assert dense > 8192**2 * 4  # one head's float32 scores
    assert blocked < dense / 20, (blocked, dense)
