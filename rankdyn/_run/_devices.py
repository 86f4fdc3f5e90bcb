r"""Use every CPU core: one XLA host device per core, configured before JAX initialises.

XLA:CPU gives a process one device by default; that device spreads a single GEMM over the
cores, but the batched LAPACK calls of the spectral metrics (one ``gesdd`` per token matrix)
and the many small operations of a layer mostly run on one core. Splitting the batch of
trajectories over one device per core (`rankdyn.simulate(..., devices="all")`) uses them all.

Why this module also sizes XLA's thread pool. In jaxlib 0.10.x a batched LAPACK custom call
(``jnp.linalg.svd``, ``eigh``, ...) runs on a worker of XLA:CPU's intra-op thread pool, splits
its batch into chunks, *schedules the chunks on that same pool* and blocks until they finish
(``ParallelBatchMap`` in ``jaxlib/cpu/lapack_kernels.cc``). The pool is shared by all host
devices and has one thread per core. When every device reaches its SVD at the same moment (an
SPMD program does), every worker blocks waiting for chunks that no free worker is left to run:
a deadlock with all threads asleep in a futex wait (see ``benchmarks/README.md``, "Several
devices", for the reproducer and the native stacks). A pool with more threads than LAPACK
calls that can block at once cannot deadlock this way, so `use_cpu_devices` makes the pool
``num_devices + cores`` threads (`pool_threads`; XLA reads its size from the ``NPROC``
environment variable when the CPU client is created): one per device that may block in a LAPACK
call, plus one per core to run the chunks. The extra threads also matter on ONE device: XLA's
default pool (one thread per core) leaves one core idle while the calling worker waits, so a
batched SVD ran on a single core; measured on 2 cores, `simulate` with the default metrics
(n 32, d 64, 256 trajectories, 128 layers) is faster with 3 pool threads than with 2
(measured: benchmarks/README.md). Upstream
removed the parallel path from open-source builds after 0.11.0 (jax-ml/jax#36927).

Why it also quiets XLA's "may be stuck" lines. Several host devices meet at every collective of
a sharded program (a ``psum``, the gather of a chunk's results); XLA:CPU logs
``rendezvous.cc ... may be stuck`` when a device thread has waited there 20 s (its default for
``--xla_cpu_collective_call_warn_stuck_timeout_seconds``), then "... Warning above was a
false-positive" when the others arrive. With the pool sized as above rankdyn's programs cannot
deadlock at a rendezvous, so a wait there is a device thread that the OS has not scheduled yet (a
loaded machine), not a hang: `use_cpu_devices` raises the threshold to `STUCK_WARNING_S` (a
value the user set in ``XLA_FLAGS`` wins). XLA aborts on a flag it does not know, so this is done
only for the jaxlib line where the flag was checked (`_FLAG_CHECKED`).
"""

from __future__ import annotations

import os
import sys
import warnings

from .._errors import UsageError

__all__ = [
    "available_cores",
    "backends_initialized",
    "pool_threads",
    "quiet_stuck_warnings",
    "resolve_num_devices",
    "use_cpu_devices",
]

#: Seconds a device thread waits at a rendezvous before XLA:CPU logs "may be stuck" (XLA: 20).
STUCK_WARNING_S = 600
_STUCK_FLAG = "--xla_cpu_collective_call_warn_stuck_timeout_seconds"
#: The jaxlib (major, minor) lines whose XLA knows `_STUCK_FLAG` (checked with jaxlib 0.10.2).
_FLAG_CHECKED = ((0, 10),)

#: The fewest pool threads per host device with which sharded LAPACK calls cannot deadlock (one
#: that may block, one that runs chunks); `pool_threads` gives at least this many.
MIN_THREADS_PER_DEVICE = 2


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def pool_threads(num_devices: int) -> int:
    """Threads of XLA:CPU's intra-op pool for ``num_devices`` host devices: one per device (its
    batched LAPACK call may block a worker) plus one per core (to run the chunks it waits for).
    At least ``MIN_THREADS_PER_DEVICE * num_devices`` (``num_devices <= cores``), so no device
    can starve (module docstring)."""
    return num_devices + available_cores()


def resolve_num_devices(n: int | str = "all", *, flag: str = "n") -> int:
    """``"all"`` -> the core count; an int in ``[1, cores]`` is returned as is.

    Raises:
        ValueError: for anything else, naming ``flag`` and the valid range.
    """
    cores = available_cores()
    if isinstance(n, str):
        if n.strip().lower() == "all":
            return cores
        try:
            n = int(n)
        except ValueError:
            raise UsageError(f"{flag} must be 'all' or an integer in [1, {cores}], got {n!r}.") from None
    if isinstance(n, bool) or not isinstance(n, int):
        raise UsageError(f"{flag} must be 'all' or an integer in [1, {cores}], got {n!r}.")
    if not 1 <= n <= cores:
        raise UsageError(
            f"{flag} must be 'all' or an integer in [1, {cores}] (this machine has {cores} core(s)), got {n}."
        )
    return n


def quiet_stuck_warnings(seconds: int | None = None) -> bool:
    """Raise XLA:CPU's "may be stuck" threshold to ``seconds`` (default `STUCK_WARNING_S`) through
    ``XLA_FLAGS`` (module docstring), unless the user set it or this jaxlib is not one where the
    flag was checked. XLA reads the variable when the CPU client is created: call it before that.

    Returns:
        Whether rankdyn set the flag.
    """
    from importlib.metadata import PackageNotFoundError, version

    flags = os.environ.get("XLA_FLAGS", "")
    if _STUCK_FLAG in flags:
        return False
    try:
        line = tuple(int(p) for p in version("jaxlib").split(".")[:2])
    except (PackageNotFoundError, ValueError):
        return False
    if line not in _FLAG_CHECKED:
        return False  # an unknown flag in XLA_FLAGS aborts the process: not worth a quiet log
    seconds = STUCK_WARNING_S if seconds is None else seconds
    os.environ["XLA_FLAGS"] = f"{flags} {_STUCK_FLAG}={int(seconds)}".strip()
    return True


def backends_initialized() -> bool:
    if "jax" not in sys.modules:  # not imported yet: nothing is initialised (and nothing is loaded)
        return False
    # jax exposes no public predicate; this private one has existed since jax 0.4.
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def use_cpu_devices(n: int | str = "all") -> int:
    """Split the CPU into ``n`` XLA host devices (default: one per core), hang-free.

    Call it at the top of a script, **before** any JAX array is created or `jax.devices()` is
    called; then pass ``devices="all"`` to `rankdyn.simulate` (or let `rankdyn.run_sweep` shard
    by itself). It sets ``jax_num_cpu_devices`` and sizes XLA:CPU's intra-op thread pool to
    ``n + cores`` threads (`pool_threads`) through the ``NPROC`` environment variable (a larger
    ``NPROC`` already set is kept): with one thread per device, batched LAPACK calls of several
    devices can deadlock on jaxlib 0.10, and even on one device a batched SVD runs on one core
    (module docstring). ``use_cpu_devices(1)`` is therefore worth calling in a one-device script
    that computes the default (SVD) metrics. Library code never calls this: it changes process-wide
    configuration, which only the program's author (or the CLI's ``--devices``) may decide.

    Arguments:
        n: ``"all"`` (one device per available core) or an integer in ``[1, cores]``.

    Returns:
        The number of CPU devices configured.

    Raises:
        ValueError: if ``n`` is not ``"all"`` or in ``[1, cores]``.
        RuntimeError: if JAX is already initialised with a different number of CPU devices
            (move the call before the first JAX operation, or start a new process).
    """
    n = resolve_num_devices(n)
    if backends_initialized():
        import jax

        have = len(jax.devices("cpu"))
        if have != n:
            raise RuntimeError(
                f"JAX is already initialised with {have} CPU device(s), so use_cpu_devices({n}) cannot take "
                "effect; call rankdyn.use_cpu_devices() before any JAX operation (array creation, "
                "jax.devices()), or start a new Python process."
            )
        if n > 1 and int(os.environ.get("NPROC", "0") or 0) < MIN_THREADS_PER_DEVICE * n:
            warnings.warn(
                f"JAX was initialised with {n} CPU devices before use_cpu_devices() could size XLA's thread "
                "pool; sharded batched LAPACK calls (SVD metrics) may deadlock on jaxlib 0.10. Call "
                "rankdyn.use_cpu_devices() before any JAX operation.",
                RuntimeWarning,
                stacklevel=2,
            )
        return n
    pool = pool_threads(n)
    if n > 1:  # collectives, and their rendezvous, only between several devices
        quiet_stuck_warnings()
    current = os.environ.get("NPROC", "")
    if not (current.isdigit() and int(current) >= pool):
        os.environ["NPROC"] = str(pool)  # read by XLA:CPU when the client is created
    if "jax" in sys.modules:
        sys.modules["jax"].config.update("jax_num_cpu_devices", n)
    else:  # JAX reads this variable when it is imported: the CLI's flag checks need no JAX import
        os.environ["JAX_NUM_CPU_DEVICES"] = str(n)
    return n
