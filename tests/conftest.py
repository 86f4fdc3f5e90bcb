"""Test configuration: float64, strict dtype and rank promotion, a `getkey` fixture, one compile
cache for the run's fresh processes, and the CPU seconds of each test in the summary.

Library code never touches JAX's global config; tests choose float64 here
(docs/theory.md#experiments: mu falls below 1e-300 without LN, which float32 cannot represent).
"""

import gc
import itertools
import os
import resource
import shutil
import tempfile
from pathlib import Path

#: JAX's persistent compilation cache, through the variables JAX reads when it is imported: one
#: cache per test run, shared by the fresh processes the tests start (a `rankdyn` command, a
#: script), which inherit these variables. The first pytest process (xdist's controller) makes the
#: folder and removes it at the end; its workers inherit the variables. The pytest processes' own
#: compiles stay uncached: the variables are removed while JAX is imported here and set again after.
#: A test whose fresh process must compile every program itself (it measures the peak RSS of a
#: first run, or times a signal against a compile) runs it without them (`helpers.own_compiles`).
SHARED_CACHE_DIR = "RANKDYN_TEST_COMPILE_CACHE"
_JAX_CACHE_VARS = {
    "JAX_COMPILATION_CACHE_DIR": None,  # the folder
    # Every program, however small or quick to compile, as `rankdyn reproduce` caches them.
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
    # A size limit turns on JAX's file lock around every read and write: processes that run at
    # once (sweep tasks) never read an entry another one is still writing (JAX would warn on stderr).
    "JAX_COMPILATION_CACHE_MAX_SIZE": str(8 * 2**30),
}
for _var in _JAX_CACHE_VARS:
    os.environ.pop(_var, None)

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402

from rankdyn.cli import GC_THRESHOLD  # noqa: E402

if jax.config.jax_compilation_cache_dir:  # JAX was imported before this file, with the variables
    jax.config.update("jax_compilation_cache_dir", None)
_MADE_CACHE = not os.environ.get(SHARED_CACHE_DIR)
if _MADE_CACHE:
    os.environ[SHARED_CACHE_DIR] = tempfile.mkdtemp(prefix="rankdyn-test-compile-")
os.environ.update({k: v or os.environ[SHARED_CACHE_DIR] for k, v in _JAX_CACHE_VARS.items()})


def pytest_unconfigure(config):
    if _MADE_CACHE:
        shutil.rmtree(os.environ.pop(SHARED_CACHE_DIR), ignore_errors=True)


# `rankdyn reproduce` caches compiled programs in ~/.cache by default; tests must not depend on what
# an earlier run left there (subprocesses inherit this too; they share this run's cache, above).
os.environ.setdefault("RANKDYN_NO_COMPILE_CACHE", "1")
# The suite is compile-bound: three XLA:CPU code-generation flags for every process of the run (the
# workers, and the fresh processes they start, which inherit XLA_FLAGS), each unless XLA_FLAGS
# already sets it. XLA reads the variable when JAX creates its backend, after this file.
# - Backend optimisation level 1, as `rankdyn reproduce --quick` compiles (every quick target's
#   numbers were bit-identical to the default level's: benchmarks/DEVNOTES.md). Level 0 is not used:
#   it changed results (two targets' numbers; test_maps' and test_stability's checks failed).
# - XLA:CPU's older per-op (elemental) emitters instead of its fusion emitters: the same HLO
#   program and fusion decisions, kernels written out by the older code generator, which compiles
#   in about half the time (benchmarks/DEVNOTES.md, "The test suite's XLA flags"). Runtime was
#   measured equal. Last bits can differ from the default emitters (two quick targets' numbers do),
#   so the README's main job, `rankdyn reproduce --quick`, runs with XLA's default emitters, and
#   the target tests read its results (helpers.quick_result).
# - The LLVM module of a program compiled as one part, not split into parts compiled on several
#   threads: splitting costs CPU seconds (the parts repeat work), and with two workers on two
#   cores no thread is free to run the parts at once (benchmarks/DEVNOTES.md).
_TEST_XLA_FLAGS = {
    "xla_backend_optimization_level": "--xla_backend_optimization_level=1",
    "xla_cpu_use_fusion_emitters": "--xla_cpu_use_fusion_emitters=false",
    "xla_cpu_parallel_codegen_split_count": "--xla_cpu_parallel_codegen_split_count=1",
}
for _name, _flag in _TEST_XLA_FLAGS.items():
    if _name not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
# OpenBLAS (NumPy's, and SciPy's, through which jaxlib's CPU linear algebra calls LAPACK) on one
# thread in every process the run starts: the two workers already keep both cores busy, and
# OpenBLAS's extra threads spin while they wait, burning CPU seconds the other worker needs
# (benchmarks/DEVNOTES.md, "OpenBLAS threads in the suite"). OpenBLAS reads the variable when it
# loads, so this reaches the workers, the fresh processes and the notebook kernels, not this
# process (NumPy is loaded before this file). The thread count changes the last bits of LAPACK
# results on larger matrices, so every process of the run computes with the same count.
# torch (the HF oracles) likewise: its intra-op threads read OMP_NUM_THREADS when it loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The cyclic garbage collector's thresholds of `rankdyn` run as the program (rankdyn/cli.py), in
# the pytest processes too: a worker holds millions of long-lived objects (JAX's caches, traced
# programs, compiled executables), and each full collection walks them all; with Python's
# defaults a few percent of a worker's CPU seconds went to the collector (benchmarks/DEVNOTES.md,
# "The garbage collector"). Garbage is still collected, in larger steps.
gc.set_threshold(*GC_THRESHOLD)
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


#: Mean CPU seconds of a test on the 2-core reference machine (clean-clone CI: the slow tier 1224 s
#: over 218 tests, the others 256 s over 742), for the order of the files below.
_MEAN_CPU_S = {True: 5.6, False: 0.35}


def pytest_collection_modifyitems(config, items):
    """Test files in order of their expected CPU seconds, the costliest first (each file's tests
    keep their order). ``--dist loadfile`` hands the files to the two workers in this order
    (pyproject passes ``--no-loadscope-reorder``, else xdist orders them by test count, and a
    file of one long end-to-end test could come last while the other worker sits idle): with the
    long files first, the two workers finish within a short file of each other."""
    cost: dict[str, float] = {}
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        cost[file] = cost.get(file, 0.0) + _MEAN_CPU_S[item.get_closest_marker("slow") is not None]
    rank = {file: i for i, file in enumerate(sorted(cost, key=lambda f: (-cost[f], f)))}
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])  # stable: a file's order stays


@pytest.fixture
def getkey():
    """Call ``getkey()`` for a fresh, deterministic PRNG key."""
    counter = itertools.count()
    return lambda: jr.PRNGKey(next(counter))


# --- CPU seconds per test, and the slow tier's total (issue 56) --------------------------------
# A wall-clock budget fails at random on a shared 2-core machine; CPU seconds (this process plus
# the children it waited for: the fresh processes a test starts) measure the work. Each test's
# setup + call + teardown is measured where it runs (an xdist worker), travels to the controller
# in the report's user_properties, and the controller prints the totals in its summary.


def _cpu_now() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item._cpu_start = _cpu_now()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown":
        report.user_properties.append(("cpu_s", _cpu_now() - getattr(item, "_cpu_start", _cpu_now())))
        report.user_properties.append(("slow", item.get_closest_marker("slow") is not None))
    return report


_CPU: dict[str, tuple[float, bool]] = {}
_WALL: dict[str, float] = {}  # setup + call + teardown, as --durations counts them
_ON: dict[str, str] = {}  # the xdist worker that ran the test


def pytest_runtest_logreport(report):
    _WALL[report.nodeid] = _WALL.get(report.nodeid, 0.0) + report.duration
    if (node := getattr(report, "node", None)) is not None:
        _ON[report.nodeid] = node.gateway.id
    props = dict(report.user_properties)
    if report.when == "teardown" and "cpu_s" in props:
        _CPU[report.nodeid] = (float(props["cpu_s"]), bool(props["slow"]))


def pytest_terminal_summary(terminalreporter):
    """The CPU seconds of the slow tier and of the rest, and the 25 costliest tests in CPU seconds
    (``--durations`` lists wall seconds). ``RANKDYN_TEST_CPU_JSON=FILE`` also writes every test's
    CPU and wall seconds into FILE (added to the tests FILE already holds).

    ``RANKDYN_TEST_TALLY=FILE``: append this session's counts as one JSON line (.ci/run sums the
    steps of the README's test command into the log's closing line)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if tally := os.environ.get("RANKDYN_TEST_TALLY"):
        import json

        words = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors"}
        words |= {"xfailed": "xfailed", "xpassed": "xpassed"}
        counts = {
            word: sum(getattr(r, "count_towards_summary", True) for r in terminalreporter.stats.get(key, []))
            for key, word in words.items()
        }
        with open(tally, "a") as f:
            f.write(json.dumps(counts) + "\n")
    if not _CPU:
        return
    slow = sum(c for c, s in _CPU.values() if s)
    rest = sum(c for c, s in _CPU.values() if not s)
    tr = terminalreporter
    tr.write_sep("=", "CPU seconds (this process and the processes it started)")
    for nodeid, (cpu, is_slow) in sorted(_CPU.items(), key=lambda kv: -kv[1][0])[:25]:
        tr.write_line(f"{cpu:8.1f}s cpu  {'slow ' if is_slow else '     '}{nodeid}")
    n_slow = sum(s for _, s in _CPU.values())
    n_rest = len(_CPU) - n_slow
    tr.write_line(f"slow tier: {slow:.0f} CPU s ({n_slow} tests); others: {rest:.0f} CPU s ({n_rest} tests)")
    # The balance of --dist loadfile: each worker's wall seconds in tests (the run's wall time is
    # the larger one plus start-up).
    if _ON:
        busy = {w: sum(_WALL[k] for k, on in _ON.items() if on == w) for w in sorted(set(_ON.values()))}
        tr.write_line(
            "wall seconds in tests per worker: " + ", ".join(f"{w} {t:.0f} s" for w, t in busy.items())
        )
    if out := os.environ.get("RANKDYN_TEST_CPU_JSON"):
        import json

        # Merged into the file's tests: the steps of the README's test command (.ci/run) add theirs.
        try:
            every = json.loads(Path(out).read_text())
        except (OSError, ValueError):
            every = {}
        every |= {k: {"cpu_s": c, "wall_s": _WALL.get(k, 0.0), "slow": s} for k, (c, s) in _CPU.items()}
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(every, indent=1))
