r"""The schedule of a QR (Benettin) run: depths, the discarded transient, the running records, and
how many steps pass between two QR factorisations (fixed, or chosen as the run goes).

**Why the QR can wait.** In exact arithmetic the QR method gives the same exponents for any
interval $q$ between factorisations: the R factor of $Df_{s+q-1}\cdots Df_s\,Q$ is the product of
the per-step R factors, and only the diagonal's logs are summed. What limits $q$ is floating
point. Over $q$ steps the columns of $Y$ drift apart in norm and in direction like
$e^{(\lambda_1-\lambda_k) q}$, which (a) is the condition number CholeskyQR2 needs below
$O(u^{-1/2})$ (`_orthonormal`) and (b) multiplies the relative rounding error of the most
contracted column, $\approx u\, e^{(\lambda_1-\lambda_k) q}$. ``qr_every="auto"`` measures that
spread on the run itself: after each factorisation the largest
$\max_i \log|R_{ii}| - \min_i \log|R_{ii}|$ over the chunk's unflagged trajectories, per step, sets
the next interval to the largest power of two $q \le$ `MAX_EVERY` with $q \cdot \text{spread} \le$
`LOG_COND` (so $\kappa \lesssim e^4 \approx 55$ and the error above stays $\lesssim 55u$ per interval,
against $\approx u\,e^{\lambda_1-\lambda_k}$ per step with $q = 1$) and
$q \max_i |\log |R_{ii}|| \le$ `LOG_RANGE` per step (the Gram matrix of a column that grew or decayed by
$e^{\pm 20}$ stays far from float32's overflow and underflow). It starts at $q = 1$ and
restarts there after a Householder fallback. The first k exponents of the ``small`` benchmark
spread by about 0.7 per layer (q = 4); a full spectrum or a collapse in a few layers keeps q = 1.
Every interval also ends at the discarded transient, at each running record and at the end.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

from .._arguments import check_count, show
from .._errors import UsageError
from .._run._plan import check_chunk

__all__ = [
    "LyapunovPlan",
    "QRPlan",
    "check_counts",
    "make_plan",
    "next_every",
    "MAX_EVERY",
    "LOG_COND",
    "LOG_RANGE",
]

#: Running estimates recorded per run (at most; fewer when there are fewer steps).
NUM_RECORDS = 16
#: The longest interval between two QR factorisations that ``qr_every="auto"`` chooses.
MAX_EVERY = 8
#: log of the condition number allowed to build up between two factorisations (module docstring).
LOG_COND = 4.0
#: log of the growth or decay of one column allowed between two factorisations.
LOG_RANGE = 20.0


class QRPlan(NamedTuple):
    """The static schedule of one run (each distinct plan is one compiled program).

    Attributes:
        num_steps: propagation steps in the run.
        qr_every: steps between two QR factorisations, or 0 for the adaptive interval.
        discard: steps before the accumulation starts.
        records: steps after which the running estimate is recorded (increasing; the last is
            ``num_steps``).
        step_size: time per propagation step (1 for maps; the saved interval for the flow).
    """

    num_steps: int
    qr_every: int
    discard: int
    records: tuple[int, ...]
    step_size: float = 1.0


@dataclasses.dataclass(frozen=True)
class LyapunovPlan:
    """A QR run's counts, checked once (no JAX): ``lyapunov_spectrum``, ``lyapunov_spectrum_flow``
    and ``rankdyn lyapunov`` build one, the command line before JAX loads (``flags=True``: the
    messages name ``--k``, ``--discard``, ``--qr-every``, ``--chunk``).

    Attributes:
        num_steps: propagation steps (``what`` names them: ``num_layers``, ``intervals``); None
            when not known yet (a checkpoint's own depth), which leaves the checks against it
            to the plan built once it is.
        dim: the dimension of the state space ($n(d-1)$ on the spheres, else $nd$); None when
            the model is not known yet (then ``k`` is checked against nothing).
        k: the exponents computed; None: ``min(default_k, dim)`` (``default_k`` None: all, ``dim``).
        discard: steps before the accumulation; qr_every: steps between two factorisations, or
            ``"auto"`` (a string of digits from the command line is read as its integer).
        chunk: trajectories advanced together (None: `rankdyn._lyapunov._budget.default_chunk`).
    """

    # Any: the values are checked in __post_init__ (a UsageError naming them), not by annotation.
    num_steps: Any
    dim: int | None = None
    k: Any = None
    discard: Any = 0
    qr_every: Any = "auto"
    chunk: Any = None
    default_k: int | None = None
    what: str = "num_steps"
    flags: bool = False

    def __post_init__(self):
        f, what = self.flags, self.what
        every = self.qr_every
        if f and isinstance(every, str) and every != "auto":
            every = int(every) if every.strip().lstrip("+").isdigit() else every
        auto = isinstance(every, str) and every == "auto"
        if not auto and (not _is_int(every) or every < 1):
            raise UsageError(f"{show('qr_every', self.qr_every, f)}: expected an integer >= 1 or auto.")
        object.__setattr__(self, "qr_every", every if auto else int(every))
        check_chunk(self.chunk, f)
        if self.dim is not None and (self.k is not None or self.dim < 1):
            k = self.exponents
            if not _is_int(k) or not 1 <= k <= self.dim:
                raise UsageError(
                    f"{show('k', k, f)}: expected 1 <= k <= {self.dim} (the number of exponents, at most "
                    f"the dimension of the state space); e.g. {show('k', max(1, min(8, self.dim)), f)}."
                )
        if self.num_steps is None:
            return
        steps = check_count(self.num_steps, what, flags=f)
        discard = check_count(self.discard, "discard", minimum=0, flags=f)
        if discard >= steps:
            raise UsageError(
                f"{show('discard', discard, f)}: expected 0 <= discard < {show(what, steps, f)}, or "
                f"nothing is left to average; e.g. {show('discard', steps // 4, f)}."
            )
        if not auto and (steps % every or discard % every):
            raise UsageError(
                f"{show(what, steps, f)} and {show('discard', discard, f)} must be multiples of "
                f"{show('qr_every', every, f)}; choose a divisor, or {show('qr_every', 'auto', f)}."
            )

    @property
    def exponents(self) -> int:
        """k, or its default: ``min(default_k, dim)`` (all ``dim`` exponents without a default)."""
        if self.k is not None:
            return self.k
        return self.dim if self.default_k is None else min(self.default_k, self.dim)

    def schedule(self, step_size: float = 1.0) -> "QRPlan":
        """The `QRPlan` of the run (`make_plan`)."""
        return make_plan(self.num_steps, self.discard, self.qr_every, step_size)

    def memory(self, num: int, n: int, d: int, heads: int, itemsize: int, devices=None, *, starts: int = 0):
        """The `MemoryEstimate` of a layer's QR run (`rankdyn._lyapunov._budget.tangent_memory`,
        what ``lyapunov_spectrum`` checks), for ``num`` trajectories: the chunk's tangent
        vectors with the attention's ``heads n^2`` score-sized tangents, the exponents and records,
        and ``starts`` copies of the starting tokens (drawn by a caller that checks first)."""
        from ._budget import default_chunk, tangent_memory  # JAX loads here

        m, k = n * d, self.exponents
        chunk = default_chunk(num, m, k, itemsize, devices) if self.chunk is None else self.chunk
        extra = {"starting tokens": starts * num * m * itemsize} if starts else None
        records = len(self.schedule().records)
        return tangent_memory(num, chunk, m, k, itemsize, records, devices, scores=heads * n * n, extra=extra)


def _is_int(v) -> bool:
    import numbers

    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_counts(num_steps, k, dim: int, discard, qr_every, what: str = "num_steps") -> LyapunovPlan:
    """``k``, ``discard``, ``qr_every`` and the depth as the method allows (a `LyapunovPlan`), or a
    `UsageError` naming the argument."""
    return LyapunovPlan(num_steps, dim, k, discard, qr_every, what=what)


def make_plan(num_steps: int, discard: int, qr_every, step_size: float = 1.0) -> QRPlan:
    """The `QRPlan` of a run, with `NUM_RECORDS` running estimates spread over the kept steps
    (at multiples of the interval after ``discard``: of `MAX_EVERY` with ``"auto"``, so that the
    records rarely cut an interval short)."""
    every = 0 if qr_every == "auto" else int(qr_every)
    kept = num_steps - discard
    unit = every or MAX_EVERY
    units = kept // unit
    if units == 0:
        unit, units = 1, kept
    r = min(NUM_RECORDS, units)
    records = sorted({discard + unit * max(1, round(units * (i + 1) / r)) for i in range(r)})
    records[-1] = num_steps  # with "auto", kept may not be a multiple of MAX_EVERY
    return QRPlan(num_steps, every, discard, tuple(records), float(step_size))


def piece_steps(plan: QRPlan, progress: bool) -> int:
    """Steps per compiled call: all of them, or about 1/20 of the run with a progress bar (a
    multiple of the interval, so that pieces end where a factorisation falls anyway)."""
    if not progress:
        return plan.num_steps
    unit = plan.qr_every or MAX_EVERY
    return min(plan.num_steps, unit * max(1, math.ceil(plan.num_steps / (20 * unit))))


def next_every(plan: QRPlan, logs, steps, ok, fell_back, every):
    r"""The interval after a factorisation (module docstring); ``every`` itself when it is fixed.

    Arguments:
        logs: ``(c, k)`` $\log |R_{ii}|$ of the interval that just ended (``steps`` long).
        ok: ``(c,)`` the trajectories that count (unflagged).
        fell_back: whether the factorisation fell back to Householder.
    """
    import jax.numpy as jnp  # traced: the plan's checks above load no JAX

    if plan.qr_every:
        return every
    steps = steps.astype(logs.dtype)
    finite = ok[:, None] & jnp.isfinite(logs)
    hi = jnp.max(jnp.where(finite, logs, -jnp.inf), axis=1)
    lo = jnp.min(jnp.where(finite, logs, jnp.inf), axis=1)
    spread = jnp.max(jnp.where(hi >= lo, hi - lo, 0.0)) / steps
    growth = jnp.max(jnp.where(finite, jnp.abs(logs), 0.0)) / steps
    # Largest power of two q <= MAX_EVERY with q * spread <= LOG_COND and q * growth <= LOG_RANGE
    # (compared, not rounded through log2, which is inexact at powers of two).
    limit = jnp.minimum(LOG_COND / jnp.maximum(spread, 1e-30), LOG_RANGE / jnp.maximum(growth, 1e-30))
    q = jnp.int32(1)
    p = 2
    while p <= MAX_EVERY:
        q = jnp.where(limit >= p, jnp.int32(p), q)
        p *= 2
    return jnp.where(fell_back, 1, q)
