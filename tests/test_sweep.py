"""`rankdyn sweep`: validation before compute, one compile per structural group, exact resume
after SIGKILL, refusal to mix configs, and agreement with `rankdyn.simulate` (reference)."""

import json
import os
import signal
import subprocess
import sys
import time

import equinox as eqx
import jax.random as jr
import numpy as np
import pytest
import xarray as xr
from helpers import assert_bitwise_datasets, ulp_distance

import rankdyn as rd
from rankdyn._sweep import _program
from rankdyn.cli import main as cli_main
from rankdyn.sweep import NETCDF_ENGINE

TINY = """
name = "tiny"
[axes]
dqk = [0.25, 1.0, 4.0, 16.0, 64.0]
seed = [0, 1]
[fixed]
mask = "causal"
n = 5
d = 4
num_layers = 6
batch = 4
save_every = 2
[observe]
per_layer = ["mu", "mu_normalized", "min_cos"]
final = ["mu", "num_rank"]
[run]
chunk = 8
"""


def _cfg(text=TINY, **replace):
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return rd.load_sweep_config(text)


@pytest.mark.parametrize(
    "edit, message",
    [
        (("seed = [0, 1]", "seed = [0, 1]\nfoo = [1, 2]"), "unknown axis 'foo'"),
        (("seed = [0, 1]", "seed = []"), "[axes] seed: empty axis"),
        (("dqk = [0.25,", "dqk = [0.0,"), "[axes] dqk = 0.0: must be > 0"),
        (
            ('mask = "causal"', 'mask = "window"\nwindow = 5'),
            "[fixed] window = 5 is not smaller than [fixed] n = 5",
        ),
        (("seed = [0, 1]", 'seed = [0, 1]\nmask = ["window", "diagonal"]'), "unknown value 'diagonal'"),
        (('mask = "causal"', 'mask = "causal"\nvalue = "jordan"\njordan_k = 9'), "[fixed] jordan_k = 9"),
        (("n = 5", "n = 5\nbatchsize = 3"), "unknown parameter 'batchsize' in [fixed]"),
        (("n = 5", "n = [5, 6]"), "[fixed] n: a fixed parameter is one value"),
        (('final = ["mu", "num_rank"]', 'final = ["rank"]'), "[observe] final: unknown metric 'rank'"),
        (
            ("num_layers = 6", "num_layers = 5"),
            "[fixed] num_layers = 5 is not a multiple of [fixed] save_every = 2",
        ),
        (
            ("[observe]\n", "[observe]\nrate_start = 6\n"),
            "[observe] rate_start = 6 is not below [fixed] num_layers = 6",
        ),
        (("[observe]\n", "[observe]\nrate_start = 2\nrate_stop = 2\n"), "rate_stop = 2 must be larger than"),
        (
            ('per_layer = ["mu", "mu_normalized", "min_cos"]', 'metrics = "mu,foo"'),
            "[observe] metrics: unknown metric 'foo'; valid names: all, mu,",
        ),
        (("[observe]\n", '[observe]\nmetrics = "mu"\n'), "has both per_layer and metrics"),
        (
            ("n = 5", "n = 5\nattn_dropout = 1.0"),
            "[fixed] attn_dropout = 1.0: a dropout rate must be in [0, 1)",
        ),
    ],
)
def test_validation_names_key_and_value(edit, message):
    with pytest.raises(ValueError) as err:
        _cfg(**{edit[0]: edit[1]})
    assert message in str(err.value)


def test_window_axis_wider_than_n_and_jordan_larger_than_d():
    with pytest.raises(ValueError, match=r"\[axes\] window = 7 is not smaller than \[axes\] n = 6"):
        _cfg(
            **{
                "seed = [0, 1]": "seed = [0, 1]\nwindow = [1, 7]\nn = [6, 8]",
                'mask = "causal"': 'mask = "window"',
                "n = 5\n": "",
            }
        )
    with pytest.raises(
        ValueError, match=r"\[axes\] jordan_k = 5: a Jordan block larger than \[fixed\] d = 4"
    ):
        _cfg(**{"seed = [0, 1]": "seed = [0, 1]\njordan_k = [2, 5]", 'mask = "causal"': 'value = "jordan"'})


def test_cli_rejects_bad_config_before_compute(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace("dqk = [0.25,", "dqk = [-1.0,"))
    out = tmp_path / "out"
    assert cli_main(["sweep", str(bad), "--out", str(out)]) == 2
    assert "[axes] dqk = -1.0" in capsys.readouterr().err
    assert not out.exists()  # nothing was created, let alone computed
    good = tmp_path / "good.toml"
    good.write_text(TINY)
    assert cli_main(["sweep", str(good), "--out", str(out), "--plot-axes", "mask", "dqk"]) == 2
    assert "--plot-axes 'mask' is not an axis of the sweep" in capsys.readouterr().err
    assert not out.exists()


def _mu_and_min_cos(t, x, args):
    """The reference runs' observer: one function, so the second run (another temperature, an
    array of the layer) reuses the first one's compiled program (a lambda is new at each call)."""
    return {"mu": rd.mu(x), "min_cos": rd.metrics.min_cosine(x)}


@pytest.mark.slow
def test_temperature_axis_compiles_once_and_matches_simulate(tmp_path, monkeypatch):
    cfg = _cfg()
    plan = rd.sweep.sweep_plan(cfg)
    assert len(plan.groups) == 1 and len(plan.chunks) == 5  # 10 cells, 2 per chunk
    # The group's program may be traced once only, however many temperatures, seeds and chunks.
    once = eqx.filter_jit(eqx.debug.assert_max_traces(_program._program_impl, max_traces=1))
    monkeypatch.setattr(_program, "_jit_program", once)
    ds = rd.run_sweep(cfg, tmp_path / "a", progress=False)
    assert ds["mu"].dims == ("dqk", "seed", "layer", "stat")
    assert list(ds["dqk"].values) == [0.25, 1.0, 4.0, 16.0, 64.0]
    # The temperature reaches the dynamics: final mu differs between temperatures.
    final_mu = ds["mu"].sel(stat="mean").isel(layer=-1).values
    assert np.all(np.abs(np.diff(final_mu, axis=0)) > 1e-8)

    # Reference: the same cell built eagerly and run by rankdyn.simulate.
    for dqk, seed in ((4.0, 1), (0.25, 0)):
        k_layer, k_x0, _ = jr.split(jr.PRNGKey(seed), 3)
        layer = rd.make_layer(k_layer, n=5, d=4, mask="causal", dqk=dqk)
        x0 = rd.initial_tokens(k_x0, "sphere", 5, 4, batch=4)
        traj = rd.simulate(
            layer,
            x0,
            6,
            save_every=2,
            observe=_mu_and_min_cos,
            per_trajectory=True,
        )
        ref = traj.summary.to_dict()
        cell = ds.sel(dqk=dqk, seed=seed)
        for name in ("mu", "min_cos", "eps_min"):
            np.testing.assert_allclose(
                cell[name].sel(stat="mean").values, ref[name]["mean"], rtol=1e-10, atol=1e-14
            )
            np.testing.assert_allclose(
                cell[name].sel(stat="std").values, ref[name]["std"], rtol=1e-8, atol=1e-14
            )
        np.testing.assert_allclose(cell["final_mu"].values, np.asarray(traj.metrics["mu"])[:, -1], rtol=1e-10)
        assert float(cell["radius"]) == 1.0  # causal mask: token 0 is the center, r = 1

    # Negative control: a shape-changing axis (d) needs a second program, and the counter sees it.
    twice = eqx.filter_jit(eqx.debug.assert_max_traces(_program._program_impl, max_traces=1))
    monkeypatch.setattr(_program, "_jit_program", twice)
    with pytest.raises(RuntimeError):
        rd.run_sweep(_cfg(**{"seed = [0, 1]": "d = [4, 6]", "d = 4\n": ""}), tmp_path / "b", progress=False)


@pytest.mark.slow  # five compiles: the whole chunk, three piece programs, the final metrics
def test_a_chunk_in_depth_pieces_is_the_same_bits_with_a_check_between_pieces(monkeypatch):
    """A sweep chunk's depth runs in pieces of a few seconds of estimated CPU work, with a check
    for signals between two: the pieces (here 3 + 3 + 1 of 7 saved blocks, with dropout) give
    the chunk's arrays of one piece bit for bit, and the checks run between pieces only."""
    from rankdyn._run import _sizing

    cfg = _cfg(**{"num_layers = 6": "num_layers = 14", "d = 4\n": "d = 4\nattn_dropout = 0.1\n"})
    plan = rd.sweep.sweep_plan(cfg)
    (g, cells), group = plan.chunks[0], plan.groups[plan.chunks[0][0]][0]
    whole = _program.compute_chunk(cfg, group, cells, plan.chunk_cells[g])
    # 880 model FLOPs per layer and trajectory x 8 trajectories x 14 layers at 2e4 FLOP/s: 4.9 s,
    # 3 pieces of at most PIECE_SECONDS (2 s): ceil(7 / 3) = 3 blocks each, the last 1 block.
    monkeypatch.setattr(_sizing, "CPU_FLOPS", 2e4)
    checks = []
    monkeypatch.setattr(_program, "check_interrupt", lambda: checks.append(1))
    run = _program.launch_chunk(cfg, group, cells, plan.chunk_cells[g])
    assert run._sizes == [3, 3, 1]
    _program.run_pieces([run])
    pieced = _program.chunk_arrays(run)
    assert len(checks) == 2
    assert sorted(pieced) == sorted(whole)
    for k in whole:
        assert whole[k].tobytes() == pieced[k].tobytes(), k


def _chunks(folder):
    return sorted((folder / "chunks").glob("chunk_*.npz"))


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.replace("chunk = 8", "chunk = 4"))  # 10 chunks of 1 cell
    cfg = rd.load_sweep_config(config)
    assert len(rd.sweep.sweep_plan(cfg).chunks) == 10
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "rankdyn.cli",
        "sweep",
        str(config),
        "--out",
        str(out),
        "--x64",
        "--no-progress",
    ]
    # A pause after each chunk (the store's hook, patched in the child) makes "after the first
    # chunk, before the last" a wide window.
    paused = [
        sys.executable,
        "-c",
        "import sys, time; from rankdyn._sweep import _store; "
        "_store._chunk_written = lambda i: time.sleep(1.0); from rankdyn.cli import main; "
        "sys.exit(main(sys.argv[1:]))",
    ] + cmd[3:]
    proc = subprocess.Popen(
        paused + ["--no-plots", "--devices", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not _chunks(out) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    done = {p.name: p.stat().st_mtime_ns for p in _chunks(out)}
    assert 1 <= len(done) < 10 and not (out / "sweep.nc").exists()

    # Resume on two (virtual CPU) devices: whole chunks side by side; the numbers must not change.
    # XLA_FLAGS extended, not replaced: the resumed chunks must compile at the optimisation level
    # of the killed run and of the uninterrupted one (conftest's, or the caller's; under -O0 the
    # default level's last bits differ).
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    two = os.environ | {"XLA_FLAGS": flags.strip()}
    res = subprocess.run(
        cmd + ["--resume", "--devices", "2"], capture_output=True, text=True, timeout=300, env=two
    )
    assert res.returncode == 0, res.stderr
    assert f"computed {10 - len(done)} chunk(s)" in res.stdout  # only the missing ones
    assert all((out / "chunks" / name).stat().st_mtime_ns == t for name, t in done.items())
    for png in ("mu_curves.png", "rate_heatmap.png", "final_rank.png"):
        assert (out / png).stat().st_size > 0

    # The stress: the resumed chunks ran side by side on two devices (the old code split each
    # chunk's 4 samples 2 + 2 over them, and a 2-sample program rounded otherwise on AMD).
    ran_on = {int(np.load(out / "chunks" / f"chunk_{i:05d}.npz")["device"]) for i in range(len(done), 10)}
    assert ran_on == {0, 1}, ran_on
    full = rd.run_sweep(cfg, tmp_path / "full", progress=False)  # uninterrupted, one device, float64
    resumed = xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load()
    # The bitwise contract (docs/sweep.md): every chunk ran its group's one program on one device,
    # so the resumed dataset equals the uninterrupted one to the last bit.
    assert_bitwise_datasets(resumed, full)
    assert resumed.attrs["config"] == full.attrs["config"] == config.read_text()
    assert resumed.attrs["config_hash"] == full.attrs["config_hash"]
    assert json.loads(resumed.attrs["devices_per_chunk"]) == [1] * 10  # no chunk was split


@pytest.mark.slow  # end to end: a sweep run, then three resumes
def test_changed_config_is_refused(tmp_path):
    out = tmp_path / "out"
    cfg = _cfg(**{"seed = [0, 1]": "seed = [0]", "dqk = [0.25, 1.0, 4.0, 16.0, 64.0]": "dqk = [1.0]"})
    rd.run_sweep(cfg, out, progress=False)
    changed = _cfg(**{"seed = [0, 1]": "seed = [0]", "dqk = [0.25, 1.0, 4.0, 16.0, 64.0]": "dqk = [2.0]"})
    with pytest.raises(ValueError, match="holds a sweep with a different configuration"):
        rd.run_sweep(changed, out, resume=True, progress=False)
    with pytest.raises(ValueError, match="already holds this sweep; pass --resume"):
        rd.run_sweep(cfg, out, progress=False)
    # Same config, resumed when complete: nothing to compute, same dataset.
    again = rd.run_sweep(cfg, out, resume=True, progress=False)
    xr.testing.assert_equal(again, xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE).load())
    # A comment-only edit is the same sweep (same hash): resumed, and config.toml shows the new text.
    commented = rd.load_sweep_config(cfg.text + "# a note\n")
    assert commented.hash == cfg.hash
    rd.run_sweep(commented, out, resume=True, progress=False)
    assert (out / "config.toml").read_text() == cfg.text + "# a note\n"


def test_cell_count_announced_and_large_grids_refused(tmp_path, capsys):
    seen = []
    with pytest.raises(
        ValueError, match=r"the grid has 10 cells \(dqk:5 x seed:2\), above the limit of 9; .*--max-cells 10"
    ):
        rd.load_sweep_config(TINY, max_cells=9, announce=seen.append)
    assert seen == [10]
    big = tmp_path / "big.toml"  # 10^8 cells: refused at once, before any per-cell check
    big.write_text(
        TINY.replace(
            "seed = [0, 1]",
            "seed = [" + ", ".join(map(str, range(10**4))) + "]\n"
            "mask_seed = [" + ", ".join(map(str, range(2 * 10**3))) + "]",
        )
    )
    # No wall-time bound (machines differ): refused before the [fixed] table, so no cell is checked.
    assert cli_main(["sweep", str(big), "--out", str(tmp_path / "o")]) == 2
    io = capsys.readouterr()
    assert "100000000 cells" in io.out and "--max-cells 100000000" in io.err
    assert not (tmp_path / "o").exists()


def test_ulp_distance_counts_units_in_the_last_place():
    one = np.float64(1.0)
    assert ulp_distance([one], [np.nextafter(np.nextafter(one, 2), 2)]) == 2.0
    assert ulp_distance([0.1, np.nan], [0.1, np.nan]) == 0.0
    assert ulp_distance([0.1], [np.nan]) == np.inf  # NaN must match NaN
    assert ulp_distance([1e-17], [2e-17]) > 4  # a relative error of 1 is far from 4 ulps


_MASKS_BY_TEMPERATURE = """
name = "masks by temperature"
[axes]
mask = ["causal", "complete"]
dqk = [1.0, 4.0]
[fixed]
n = 4
d = 3
num_layers = 2
batch = 2
save_every = 1
[observe]
per_layer = ["mu"]
final = ["mu"]
"""


@pytest.mark.slow
def test_float32_sweep_is_stored_in_float32_and_graph_over_mask_axes_only(tmp_path):
    """Without --x64 the stored values are float32 (they were float64 copies of float32 numbers);
    the mask's graph quantities carry the mask axis only, not the temperature's."""
    config = tmp_path / "s.toml"
    config.write_text(_MASKS_BY_TEMPERATURE)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "rankdyn.cli", "sweep", str(config), "--out", str(out), "--no-plots"]
    proc = subprocess.run([*cmd, "--no-progress"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ds = xr.open_dataset(out / "sweep.nc", engine=NETCDF_ENGINE)
    assert ds.attrs["dtype"] == "float32"
    assert ds["mu"].dtype == np.float32 and ds["final_mu"].dtype == np.float32
    assert ds["mu"].dims == ("mask", "dqk", "layer", "stat")
    for name in ("radius", "strongly_connected", "quasi_strongly_connected", "num_centers"):
        assert ds[name].dims == ("mask",), name
    assert ds["radius"].sel(mask="causal").item() == 1.0 and ds["radius"].sel(mask="complete").item() == 1.0
    assert ds["num_centers"].sel(mask="complete").item() == 4
