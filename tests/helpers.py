"""Shared by the test modules: a small zoo of test cases (n <= 8, d <= 8), the results of the
main job's ``rankdyn reproduce --quick`` when this source made them, and fresh-process helpers."""

import json
import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax.numpy as jnp
import numpy as np

import rankdyn as rd

PAPER_MASKS = ("complete", "causal", "window", "window-uni")

#: Where ``rankdyn reproduce --quick`` writes by default: the README's main job, which .ci/run runs
#: before the tests (``RANKDYN_TEST_REPRODUCE_OUT`` names another folder).
REPRODUCE_OUT = Path(
    os.environ.get("RANKDYN_TEST_REPRODUCE_OUT") or Path(__file__).resolve().parents[1] / "out/reproduce"
)
#: The run flags of that job (``run_flags`` in every result): quick mode, the default seed.
QUICK_RUN_FLAGS = {"quick": True, "seed": 0, "x64": False, "checkpoint": None}

#: The start of ``python -c`` code for a child that must stop on SIGINT: Python's default handler
#: (KeyboardInterrupt), even if this runner ignores SIGINT (one started in the background does,
#: its children inherit that, and rankdyn rightly leaves an ignored signal ignored).
SIGINT_DEFAULT = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "


def quick_result(name: str) -> dict | None:
    """Target ``name``'s result from the main job's ``rankdyn reproduce --quick`` (`REPRODUCE_OUT`),
    or None unless this source made it: its provenance names this package's `source_digest` and
    these versions of the packages that determine the numbers, its run flags are the job's
    (`QUICK_RUN_FLAGS`), and its figures are on disk. A stale ``out/`` (another commit, an edited
    file) gives None, and the test runs the target's tiny version instead."""
    from rankdyn._run._io import source_digest, versions

    try:
        res = json.loads((REPRODUCE_OUT / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(res, dict):
        return None
    prov = res.get("provenance") or {}
    fresh = prov.get("source") == source_digest() and prov.get("versions") == versions()
    if not (fresh and res.get("name") == name and res.get("run_flags") == QUICK_RUN_FLAGS):
        return None
    if not all((REPRODUCE_OUT / f).is_file() for f in res.get("figures", [])):
        return None
    return res


def target_result(name: str, tmp_path: Path, **size) -> tuple[dict, Path]:
    """The quick run's result of target ``name`` and its folder (`quick_result`), else a fresh
    ``run_target(name, tmp_path, quick=True, seed=0, **size)`` (a tiny version, by ``size=``)
    and ``tmp_path``. A test's statements about a target must hold at both sizes."""
    if (res := quick_result(name)) is not None:
        return res, REPRODUCE_OUT
    from rankdyn._reproduce import run_target

    return run_target(name, tmp_path, quick=True, seed=0, **size), tmp_path


def own_compiles(env=None) -> dict:
    """``env`` (default: this process's environment) without the run's shared compilation cache
    (tests/conftest.py), for a fresh process that must compile every program itself: one whose
    test counts compiles, or sends a signal timed to land during a compile."""
    env = dict(os.environ if env is None else env)
    for var in ("JAX_COMPILATION_CACHE_DIR", "JAX_COMPILATION_CACHE_MAX_SIZE"):
        env.pop(var, None)
    for var in ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"):
        env.pop(var, None)
    return env


def small_layer(key, *, n=6, d=6, mask="causal", placement="post", value="orthogonal", qk="gaussian", **kw):
    return rd.make_layer(key, n=n, d=d, mask=mask, placement=placement, value=value, qk=qk, **kw)


#: ``f(*args)`` as one compiled call, shared by the test files that call library functions (a
#: layer, a field, a metric) outside `jit`: eagerly, every operation compiled a program of its own.
#: One module-level function, so calls with equal shapes reuse one program.
jit_call = eqx.filter_jit(lambda f, *args: f(*args))

#: One layer step ``layer(x, t)``'s tokens, ``t`` traced (`python_loop`'s step).
layer_step = eqx.filter_jit(lambda lay, x, t: lay(x, t)[0])


def python_loop(layer, x0, num_layers):
    """Reference: iterate the layer in a plain Python loop (what peers write), each step one
    compiled call with ``t`` traced (called eagerly, every operation of the layer compiled a
    program of its own)."""
    xs = [x0]
    for t in range(num_layers):
        xs.append(layer_step(layer, xs[-1], jnp.asarray(t)))
    return np.stack([np.asarray(x) for x in xs])


def ulp_distance(a, b):
    """Largest distance between a and b in units in the last place of the larger magnitude.

    The device/chunk contract (docs/sweep.md): results across device counts and chunk sizes agree
    to at most 4 ulps in each metric, because XLA may vectorise a different batch shape with a
    different summation order. NaN must match NaN; infinities must match exactly.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b):
        return np.inf
    a, b = a[~nan_a], b[~nan_b]
    if not np.array_equal(np.isinf(a), np.isinf(b)) or not np.array_equal(a[np.isinf(a)], b[np.isinf(b)]):
        return np.inf
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0:
        return 0.0
    ulp = np.spacing(np.maximum(np.abs(a), np.abs(b)))
    return float(np.max(np.abs(a - b) / ulp))


def sphere_tokens(key, n, d, batch=None):
    return rd.initial_tokens(key, "sphere", n, d, batch=batch)


def assert_bitwise_datasets(a, b):
    """Two sweep datasets equal to the last bit: every variable (NaN where NaN), the coordinates
    and the config hash (the sweep's bitwise contract, docs/sweep.md)."""
    import xarray as xr

    assert set(a.data_vars) == set(b.data_vars) and {"mu", "eps_min", "final_mu"} <= set(a.data_vars)
    for k in b.data_vars:
        x, y = np.asarray(a[k].values), np.asarray(b[k].values)
        assert x.dtype == y.dtype and x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), (k, x, y)
    xr.testing.assert_equal(a.coords.to_dataset(), b.coords.to_dataset())
    assert a.attrs["config_hash"] == b.attrs["config_hash"]


#: Runs several command lines in one fresh process; prints their exit codes and whether JAX loaded.
_PROBE = """
import json, sys
from rankdyn.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
print("RESULT", json.dumps(codes), "jax" in sys.modules)
"""


def refusals_in_one_process(cases: dict) -> tuple[list[str], bool]:
    """Run ``cases`` (expected words -> argv) in one fresh process: every one must exit 2 with one
    ``error:`` line containing its words. Returns the error lines and whether JAX was imported."""
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(cases.values()))],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    line = next(x for x in res.stdout.splitlines() if x.startswith("RESULT"))
    codes, jax = line.removeprefix("RESULT ").rsplit(" ", 1)
    errors = [x for x in res.stderr.splitlines() if "error:" in x]
    assert json.loads(codes) == [2] * len(cases) and len(errors) == len(cases), res.stderr
    for says, err in zip(cases, errors):
        assert says in err, (says, err)
    return errors, jax == "True"
