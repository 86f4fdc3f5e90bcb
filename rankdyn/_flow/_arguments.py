"""Checks of `rankdyn.flow.solve_flow`'s arguments that the time grid and ``x0`` checks leave out.

Without these checks each would run silently wrong or crash later: ``times`` with NaN or inf (NaN
everywhere), float16 or complex ``x0`` (NaN, or a dtype error deep in the solver), ``t1`` or
``saves`` next to ``times`` (ignored), ``chunk <= 0`` (clamped to 1), ``max_steps <= 0``, and a call
under ``jax.jit`` / ``vmap`` / ``grad`` (a tracer error): `solve_flow` is a Python loop of compiled
pieces, so it refuses tracers with one clear error.

The flow's memory is checked here too, from the sizes alone, before anything is allocated
(`check_flow_memory`, `solve_flow`'s call of `rankdyn.plans.FlowPlan`, which ``rankdyn flow`` builds
itself): ``--batch 2000000 --n 64 --d 64`` failed in XLA after 15 s and ``--saves 10000000`` ran for
minutes without a word; the noisy flow was not estimated at all.
"""

from __future__ import annotations

import jax
import numpy as np

from .._errors import UsageError
from ._plan import MAX_CHUNK, SOLVE_FLOW_FIXES, FlowPlan, piece_length, resolve_chunk

__all__ = [
    "check_flow_arguments",
    "check_beta_range",
    "check_flow_memory",
    "piece_length",
    "resolve_chunk",
    "MAX_CHUNK",
    "SOLVE_FLOW_FIXES",
]


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_flow_arguments(x0, t1, times, saves, chunk, max_steps) -> None:
    """Refuse the arguments of `solve_flow` that it would ignore, clamp or fail on later.

    Raises:
        UsageError: naming the argument and the fix.
    """
    leaves = [x0, t1, times]
    if any(isinstance(v, jax.core.Tracer) for v in leaves):
        raise UsageError(
            "solve_flow cannot run under jax.jit, vmap or grad: it runs compiled pieces in a Python loop "
            "(chunks, progress, step-limit flags). Call it outside the transformation; to differentiate "
            "or batch, pass a batch of x0 or an array of beta."
        )
    if times is not None:
        if t1 is not None or saves is not None:
            raise UsageError("pass either times= or t1 (and saves=), not both: times= sets the saved times.")
        t = np.asarray(times)
        if not np.issubdtype(t.dtype, np.number) or np.iscomplexobj(t) or not np.all(np.isfinite(t)):
            raise UsageError("times must be finite real numbers (no NaN or inf).")
    dtype = np.asarray(x0).dtype if not hasattr(x0, "dtype") else np.dtype(x0.dtype)
    if dtype.kind == "c" or dtype.kind not in "fiub":
        raise UsageError(f"x0 must be real (float32 or float64), got dtype {dtype}.")
    if dtype.kind == "f" and dtype.itemsize < 4:
        raise UsageError(
            f"x0 is {dtype}: the flow's softmax and solver tolerances need float32 or float64; "
            "convert it with x0.astype('float32')."
        )
    if chunk is not None and (not _is_int(chunk) or chunk < 1):
        raise UsageError(f"chunk must be an integer >= 1 (trajectories vmapped together), got {chunk!r}.")
    if not _is_int(max_steps) or max_steps < 1:
        raise UsageError(f"max_steps must be an integer >= 1, got {max_steps!r}.")


def check_beta_range(beta: float, dtype, dynamics: str, flag: str = "--beta") -> None:
    r"""Refuse a temperature whose flow overflows ``dtype``.

    With $Q = K = I$ on the sphere the scores are at most $\beta$: USA's weights
    $e^{\beta\langle x_i, x_j\rangle}/n$ overflow once $\beta > \log(\text{max})$, and the energy
    $E_\beta \le e^\beta / (2\beta)$ once $\beta - \log 2\beta > \log(\text{max})$ (SA's softmax is
    shifted by its maximum and never overflows). float32's $\log(\text{max}) \approx 88.7$.

    Raises:
        UsageError: naming ``flag`` and ``--x64`` (float64 reaches $\beta \approx 709$).
    """
    limit = float(np.log(np.finfo(dtype).max))
    worst = beta if dynamics == "usa" else beta - float(np.log(2 * beta)) if beta > 0 else 0.0
    if worst > limit - 1.0:  # a margin of e: the sums over n^2 pairs stay finite too
        raise UsageError(
            f"{flag} {beta:g}: the {'weights' if dynamics == 'usa' else 'energy'} e^beta overflow "
            f"{np.dtype(dtype).name} (its range ends at e^{limit:.1f}); add --x64 or choose a smaller {flag}."
        )


def check_flow_memory(
    *,
    batch: int,
    n: int,
    d: int,
    saves: int,
    betas: int,
    itemsize: int,
    chunk: int | None,
    per_trajectory: bool,
    save_states: bool,
    fixes: dict[str, str] | None = None,
    what: str,
    noise: bool = False,
) -> None:
    """Refuse a flow that cannot fit in memory (`rankdyn.plans.FlowPlan`), before compute: the
    library's call, naming `solve_flow`'s arguments (``rankdyn flow`` builds its plan with flags).

    Arguments:
        fixes: the fix per part of the estimate (default `SOLVE_FLOW_FIXES`).

    Raises:
        UsageError: with the estimate, the memory available and the fix.
    """
    plan = FlowPlan(
        n=n, d=d, batch=batch, saves=saves, betas=betas, itemsize=itemsize, chunk=chunk,
        noise=noise, per_trajectory=per_trajectory, save_states=save_states,
    )  # fmt: skip
    plan.check_memory(what=what, fixes=fixes)
