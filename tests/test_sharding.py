"""Batch sharding over several devices equals one device to the last bit, and never hangs.

The CPU is split into several XLA devices (``--xla_force_host_platform_device_count`` or
`rankdyn.use_cpu_devices`), which must happen before JAX initialises: those runs are
subprocesses. The checks on 4 devices (`simulate` and `lyapunov_spectrum`) share one process, so
the suite starts and imports JAX once for them; `use_cpu_devices(2)`'s own route (its pool size,
no hang) needs a process of its own.
"""

import json
import os
import subprocess
import sys
import textwrap
import time

import jax
import pytest

import rankdyn as rd
from rankdyn._run._sharding import batch_mesh, resolve_mesh

SCRIPT = textwrap.dedent(
    """
    import json
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, jax.random as jr, numpy as np
    import rankdyn as rd
    from rankdyn._run._sharding import batch_mesh, shard_batch

    out = {"num_devices": len(jax.devices())}
    layer = rd.make_layer(jr.PRNGKey(0), n=6, d=6, mask="causal", qk="gaussian", num_layers=8)
    # 10 trajectories on 4 devices: exercises the padding; (2, 5) batch shape: the flattening.
    x0 = rd.initial_tokens(jr.PRNGKey(1), "sphere", 6, 6, batch=(2, 5))
    one = rd.simulate(layer, x0, 8, save_every=2, save_states=True)
    many = rd.simulate(layer, x0, 8, save_every=2, save_states=True, devices="all")
    mu_only = jax.tree_util.Partial(lambda t, x, args: {"mu": rd.mu(x)})
    # 2 devices, chunks of 2, with dropout: the per-trajectory key streams must follow the
    # trajectories onto their devices.
    drop = rd.make_layer(jr.PRNGKey(2), n=6, d=6, mask="window", qk="gaussian", dropout=0.2)
    kw = dict(save_every=2, chunk=2, key=jr.PRNGKey(4), observe=mu_only, per_trajectory=True)
    two = rd.simulate(drop, x0, 8, devices=2, **kw)
    one2 = rd.simulate(drop, x0, 8, **kw)
    bits = lambda a: np.asarray(a).tobytes()
    same = lambda r, s: all(bits(r.metrics[k]) == bits(s.metrics[k]) for k in s.metrics) and all(
        bits(getattr(r.summary, st)[k]) == bits(getattr(s.summary, st)[k])
        for st in ("mean", "std", "min", "max") for k in s.summary.mean
    )
    out["bitwise_all"] = same(many, one) and bits(many.states) == bits(one.states)
    out["bitwise_two"] = same(two, one2)
    out["same_flags"] = bool(np.array_equal(one.degenerate, many.degenerate)
                             and np.array_equal(one.nonfinite, many.nonfinite))
    out["shapes_equal"] = all(one.metrics[k].shape == many.metrics[k].shape for k in one.metrics)
    # shard_batch really splits the leading axis over the 4 devices.
    xs = shard_batch(jnp.zeros((8, 6, 6)), batch_mesh())
    out["shard_devices"] = len(xs.sharding.device_set)
    out["shard_rows"] = sorted({s.data.shape[0] for s in xs.addressable_shards})
    try:
        shard_batch(jnp.zeros((3, 6, 6)))
        out["odd_raises"] = False
    except ValueError as e:
        out["odd_raises"] = "multiple of" in str(e)
    # Compiles do not grow with the number of chunk rounds on a mesh: the running statistics enter
    # every round with the sharding the rounds return them in (else the second round compiles the
    # depth programs again). Fresh shapes for each run: n = 5 one round, n = 7 two rounds.
    from rankdyn._run._io import CompileTimer
    compiles = []
    for n, batch in ((5, 4), (7, 8)):
        lay = rd.make_layer(jr.PRNGKey(5), n=n, d=n, mask="causal", qk="gaussian")
        xb = rd.initial_tokens(jr.PRNGKey(6), "sphere", n, n, batch=batch)
        with CompileTimer() as timer:
            rd.simulate(lay, xb, 4, chunk=2, devices=2, observe=mu_only)
        compiles.append(timer.compiles)
    out["compiles_one_and_two_rounds"] = compiles
    print(json.dumps(out))
    """
)


# lyapunov_spectrum in the same process (4 devices): whole chunks run one per device, so a chunk's
# exponents, QR schedule and statistics are those of a one-device run.
LYAPUNOV_SCRIPT = textwrap.dedent(
    """
    import json
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp, numpy as np
    import rankdyn as rd
    n, d = 4, 3
    layer = rd.SelfAttentionLayer(np.tril(np.ones((n, n), bool)), 0.5 * jnp.eye(d), jnp.eye(d), jnp.eye(d))
    x0 = jax.random.normal(jax.random.PRNGKey(0), (7, n, d))  # 7 trajectories in chunks of 3: padding
    one = rd.lyapunov_spectrum(layer, x0, 16, k=4, key=jax.random.key(0))
    fields = ("exponents", "mean", "std", "min", "max", "running_mean", "running_std", "running_min",
              "running_max", "flags", "count")
    runs = {k: rd.lyapunov_spectrum(layer, x0, 16, k=4, chunk=3, devices=k, key=jax.random.key(0))
            for k in (None, 2, 4)}
    gap = lambda f: float(np.max(np.abs(np.asarray(getattr(one, f)) - np.asarray(getattr(runs[2], f)))))
    print(json.dumps({"devices": len(jax.devices()), "diff": gap("exponents"), "mean_diff": gap("mean"),
                      "unequal": [f"{f} on {k} devices" for k in (2, 4) for f in fields
                                  if not np.array_equal(np.asarray(getattr(runs[None], f)),
                                                        np.asarray(getattr(runs[k], f)), equal_nan=True)]}))
    """
)


@pytest.mark.slow
def test_sharded_simulate_and_lyapunov_equal_single_device():
    """One process with 4 CPU devices for both checks (each prints one JSON line)."""
    # NPROC: at least 2 pool threads per device, as rankdyn.use_cpu_devices sets (it refuses 4 on 2 cores).
    # XLA_FLAGS extended, not replaced: the optimisation level of the suite (conftest) stays; both
    # checks compare runs of this one process.
    flags = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu", NPROC="8")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT + LYAPUNOV_SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out, lyap = (json.loads(line) for line in proc.stdout.strip().splitlines()[-2:])
    assert out["num_devices"] == 4
    assert out["shard_devices"] == 4 and out["shard_rows"] == [2]
    assert out["shapes_equal"] and out["same_flags"] and out["odd_raises"]
    # The bitwise contract: every device runs whole chunks of the same width, and the statistics
    # are folded in batch order, so 1, 2 or 4 devices give the same bits (values, states, stats).
    assert out["bitwise_all"] and out["bitwise_two"], out
    one_round, two_rounds = out["compiles_one_and_two_rounds"]
    assert one_round > 0 and two_rounds == one_round, out
    # lyapunov_spectrum: bit for bit on 2 and 4 devices (the bitwise contract); against another
    # chunking (one device, one chunk) only to rounding.
    assert lyap["devices"] == 4 and lyap["diff"] < 1e-12 and lyap["mean_diff"] < 1e-12, lyap
    assert lyap["unequal"] == [], lyap


def test_mesh_arguments_are_checked():
    mesh = batch_mesh()
    assert mesh.axis_names == ("batch",) and mesh.devices.size == len(jax.devices())
    assert resolve_mesh(None) is None
    assert resolve_mesh(1).devices.size == 1
    with pytest.raises(ValueError, match="device"):
        batch_mesh(len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="empty"):
        batch_mesh([])
    bad = jax.sharding.Mesh(mesh.devices, ("data",))
    with pytest.raises(ValueError, match="axis 'batch'"):
        resolve_mesh(bad)
    with pytest.raises(ValueError, match="chunk"):
        rd.simulate(rd.make_layer(jax.random.PRNGKey(0), n=3, d=3), jax.numpy.ones((2, 3, 3)), 1, chunk=0)


def test_use_cpu_devices_checks_its_argument_and_a_running_jax():
    from rankdyn._run._devices import available_cores, resolve_num_devices

    cores = available_cores()
    assert resolve_num_devices("all") == resolve_num_devices("ALL") == cores
    assert resolve_num_devices(1) == resolve_num_devices("1") == 1
    for bad in (0, -1, cores + 1, "two", True):
        with pytest.raises(ValueError, match=r"--devices must be 'all' or an integer in \[1, "):
            resolve_num_devices(bad, flag="--devices")
    jax.numpy.zeros(1).block_until_ready()  # JAX is now initialised (with this process's devices)
    have = len(jax.devices("cpu"))
    assert rd.use_cpu_devices(have) == have  # same count: nothing to change, no error
    if have < cores:
        with pytest.raises(RuntimeError, match="already initialised with"):
            rd.use_cpu_devices(have + 1)


@pytest.mark.slow  # end-to-end (a whole target, or a fresh process)
def test_use_cpu_devices_sizes_the_pool_one_thread_per_device_plus_one_per_core():
    """A fresh process: the pool XLA will read (NPROC) is n + cores, also for one device (where
    XLA's default of one thread per core leaves a batched SVD on one core), and a larger NPROC
    already set is kept."""
    from rankdyn._run._devices import available_cores, pool_threads

    cores = available_cores()
    assert pool_threads(1) == cores + 1 and pool_threads(cores) == 2 * cores
    script = "import os, rankdyn as rd; rd.use_cpu_devices({n}); print(os.environ['NPROC'])"
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "NPROC")}
    for n, env_n, want in ((1, env, cores + 1), ("'all'", env, 2 * cores), (1, env | {"NPROC": "64"}, 64)):
        out = subprocess.run(
            [sys.executable, "-c", script.format(n=n)], env=env_n, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout.split()[-1]) == want, (n, out.stdout)


# Sharded SVD metrics on 2 devices, repeated: with jaxlib 0.10's one-thread-per-core pool this
# deadlocked in most runs (benchmarks/README.md, "Several devices"); use_cpu_devices must not.
HANG_SCRIPT = textwrap.dedent(
    """
    import sys
    import rankdyn as rd
    rd.use_cpu_devices(2)
    import jax, jax.random as jr
    layer = rd.make_layer(jr.PRNGKey(0), n=16, d=32, mask="causal", qk="bert")
    x0 = rd.initial_tokens(jr.PRNGKey(1), "sphere", 16, 32, batch=256)
    for rep in range(int(sys.argv[1])):
        traj = rd.simulate(layer, x0, 16, devices="all")  # default metrics: a batched SVD per layer
        jax.block_until_ready(traj)
    print(len(jax.devices()), "devices ok")
    """
)


def run_watched(cmd, env, *, stall_s=20.0, limit_s=240.0):
    """Run ``cmd``; "hang" if its CPU time stops growing for ``stall_s`` (a deadlock sleeps,
    a slow run on a busy machine does not), else its return code and output."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stat = f"/proc/{proc.pid}/stat"
    last, since, start = None, time.monotonic(), time.monotonic()
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            try:
                fields = open(stat).read().rsplit(")", 1)[1].split()
                cpu = int(fields[11]) + int(fields[12])  # utime + stime (ticks)
            except (OSError, IndexError):
                continue
            now = time.monotonic()
            if cpu != last:
                last, since = cpu, now
            elif now - since > stall_s or now - start > limit_s:
                return "hang" if now - since > stall_s else "timeout", ""
        return proc.returncode, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the watchdog reads /proc")
def test_sharded_default_metrics_never_hang():
    from rankdyn._run._devices import available_cores

    if available_cores() < 2:
        pytest.skip("needs 2 cores")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "NPROC")} | {"JAX_PLATFORMS": "cpu"}
    # One process, 8 repeats: the 8 sharded runs of two processes of 4, without a second start and
    # compile (the deadlock struck a run, whichever process it was in).
    rc, out = run_watched([sys.executable, "-c", HANG_SCRIPT, "8"], env)
    assert rc == 0 and "2 devices ok" in out, rc


def test_cli_refuses_bad_devices_before_compute(capsys):
    from rankdyn.cli import main

    for cmd in (["simulate"], ["sweep", "no-such.toml", "--out", "x"], ["reproduce"], ["equilibria"]):
        for bad in ("0", "-2", "100000", "many"):
            assert main([*cmd, "--devices", bad]) == 2
            err = capsys.readouterr().err
            assert f"rankdyn {cmd[0]}: error: --devices must be 'all' or an integer in [1, " in err, err
            assert "Traceback" not in err
