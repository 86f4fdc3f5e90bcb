"""The plan of a flow run: its sizes checked and its memory estimated once, without JAX.

`FlowPlan` holds what ``rankdyn flow`` and `rankdyn.flow.solve_flow` (deterministic or noisy) know
before anything is allocated: the tokens, the batch and its chunk, the saved times, the
temperatures, what is kept (per-trajectory values, states) and whether the drift is the
deterministic field or the noisy flow's (dense up to `DENSE_MAX` tokens, row-blocked above). From
these, `FlowPlan.memory` is the run's peak-memory estimate (`rankdyn._run._memory.flow_memory`) and
`FlowPlan.check_memory` refuses a run that cannot fit, naming the flags (``flags=True``: the
command line, before the mask, the field or the starts exist) or the arguments to lower.

This module imports no JAX; the row blocks of the noisy drift and the pieces of the saved times are
defined here and read by the solvers (`rankdyn._flow._noise`, `rankdyn._flow._solve`,
`rankdyn._flow._sde`), so the estimate and the run cannot disagree on them.
"""

from __future__ import annotations

import dataclasses
import math

from .._arguments import check_count
from .._run._memory import FLOW_PARTS, MemoryEstimate, check_memory, flow_memory

__all__ = [
    "FlowPlan",
    "BLOCK_ROWS",
    "DENSE_MAX",
    "MAX_CHUNK",
    "FLOW_FLAG_FIXES",
    "SOLVE_FLOW_FIXES",
    "piece_length",
    "resolve_chunk",
]

#: Query rows per block of the noisy drift once ``n`` exceeds `DENSE_MAX`: memory O(n * block).
BLOCK_ROWS = 256
#: Up to this many tokens the drift is the dense `FlowField` itself (the same bits as the ODE path).
DENSE_MAX = 1024
#: Trajectories vmapped together by default (`solve_flow`'s ``chunk=None``): all, up to this many.
MAX_CHUNK = 1024
#: Metrics the default observers record: `FlowObserver`'s `FLOW_METRICS` (deterministic flow).
_FLOW_METRICS = 8

#: What shrinks each part of the flow's estimate (`rankdyn._run._memory.FLOW_PARTS`), in the flags
#: of ``rankdyn flow`` (which has no ``--chunk``: all trajectories up to `MAX_CHUNK` at once).
FLOW_FLAG_FIXES = {
    "tokens": "lower --batch (and run several seeds), --n or --d.",
    "piece": "lower --saves (a compiled piece keeps about a twentieth of them), --n or --batch.",
    "drift": "lower --n (the drift's attention weights are n x n up to 1024 tokens) or --batch.",
    "mask": "lower --n.",
    "stats": "lower --saves.",
    "per_trajectory": "lower --saves or --batch.",
    "states": "drop --save-states, or lower --saves or --batch.",
}
#: The same, in `solve_flow`'s arguments.
SOLVE_FLOW_FIXES = {
    "tokens": "pass fewer trajectories in x0 and call solve_flow once per part.",
    "piece": "use fewer saved times (a compiled piece keeps about a twentieth of them), or a smaller chunk.",
    "drift": "pass a smaller chunk (trajectories vmapped together), or fewer tokens.",
    "mask": "use fewer tokens.",
    "stats": "use fewer saved times (saves or times).",
    "per_trajectory": "pass per_trajectory=False (only statistics are kept), or fewer saved times.",
    "states": "pass save_states=False, or fewer saved times or trajectories.",
}


def resolve_chunk(chunk: int | None, batch: int) -> int:
    """Trajectories vmapped together: ``chunk`` (checked >= 1) or all, at most `MAX_CHUNK`."""
    return min(batch, MAX_CHUNK) if chunk is None else min(int(chunk), batch)


def piece_length(intervals: int) -> int:
    """Intervals per compiled piece: the smallest divisor of ``intervals`` >= intervals / 20 (equal
    pieces share one compilation; about 20 of them give a progress bar something to show)."""
    for p in range(max(1, math.ceil(intervals / 20)), intervals + 1):
        if intervals % p == 0:
            return p
    return intervals


def density_metrics(d: int) -> int:
    """Metrics `DensityObserver` records, with the noisy flow's ``radius_drift``: the order parameter,
    ``clustered`` and the drift; on S^1 and S^2 three harmonics; on S^1 the cluster count."""
    return 3 + (3 if d in (2, 3) else 0) + (1 if d == 2 else 0)


@dataclasses.dataclass(frozen=True)
class FlowPlan:
    r"""A flow run's sizes, checked once (no JAX), and its memory estimate.

    Attributes:
        n, d: tokens and their dimension.
        batch: trajectories; ``chunk``: vmapped together (None: all, at most `MAX_CHUNK`).
        saves: saved times (the intervals' ends, ``t = 0`` included).
        betas: temperatures vmapped over.
        itemsize: bytes per number (4 float32, 8 float64).
        noise: the noisy flow (its drift dense up to `DENSE_MAX` tokens, row blocks of
            `BLOCK_ROWS` queries above; its observer $O(nd)$).
        per_trajectory, save_states: what is kept beyond the statistics.
        num_metrics: metrics recorded per saved time (None: the default observer's).
        flags: name the command line's flags in the refusal (else `solve_flow`'s arguments).
    """

    n: int
    d: int
    batch: int
    saves: int
    betas: int = 1
    itemsize: int = 4
    chunk: int | None = None
    noise: bool = False
    per_trajectory: bool = False
    save_states: bool = False
    num_metrics: int | None = None
    flags: bool = False

    def __post_init__(self):
        f = True if self.flags else None
        for name in ("n", "d", "batch", "betas", "itemsize"):
            check_count(getattr(self, name), name, flags=f)
        check_count(self.saves, "saves", minimum=2, flags=f)
        if self.chunk is not None:
            check_count(self.chunk, "chunk", flags=f)

    @property
    def resolved_chunk(self) -> int:
        """Trajectories per compiled piece (`resolve_chunk`)."""
        return resolve_chunk(self.chunk, self.batch)

    @property
    def piece(self) -> int:
        """Saved intervals per compiled piece (`piece_length`)."""
        return piece_length(self.saves - 1)

    @property
    def drift_entries(self) -> int | None:
        """Numbers per trajectory the noisy drift's attention holds at once (None: the deterministic
        flow, whose observer's ``n x n`` matrices bound its drift's). XLA's ``memory_analysis`` of the
        drift (float32, d = 3): one ``(n, n)`` array up to `DENSE_MAX` tokens (the softmax fused:
        1.0 n^2 at n = 512 and 1024), two ``(BLOCK_ROWS, n)`` ones above, besides the mask's row
        blocks (n^2 bytes, the ``"mask"`` part) (``tests/test_flow_plan.py`` checks both)."""
        if not self.noise:
            return None
        return self.n * self.n if self.n <= DENSE_MAX else 2 * BLOCK_ROWS * self.n

    def memory(self) -> MemoryEstimate:
        """The run's peak memory per part (`rankdyn._run._memory.flow_memory`)."""
        default = density_metrics(self.d) if self.noise else _FLOW_METRICS
        return flow_memory(
            batch=self.batch,
            chunk=self.resolved_chunk,
            piece=self.piece,
            saves=self.saves,
            n=self.n,
            d=self.d,
            betas=self.betas,
            itemsize=self.itemsize,
            num_metrics=default if self.num_metrics is None else self.num_metrics,
            per_trajectory=self.per_trajectory,
            save_states=self.save_states,
            drift_entries=self.drift_entries,
        )

    def check_memory(
        self, *, what: str | None = None, fixes: dict[str, str] | None = None, available=None
    ) -> MemoryEstimate:
        """Refuse the run when `memory` exceeds the memory available (`rankdyn._run._memory.check_memory`),
        with the fix for its largest part in the flags (``flags``) or `solve_flow`'s arguments.

        Arguments:
            what: how the message names the run (default: the flags' sizes, or ``solve_flow``).
            fixes: the fix per part, keyed as `rankdyn._run._memory.FLOW_PARTS` (default
                `FLOW_FLAG_FIXES` or `SOLVE_FLOW_FIXES`).
            available: ``(bytes, where)`` (probed when None: JAX loads for the backend).

        Returns:
            The estimate (the run fits, or the available memory is unknown).

        Raises:
            UsageError: with the estimate, its largest part, the memory available and the fix.
        """
        est = self.memory()
        fixes = fixes or (FLOW_FLAG_FIXES if self.flags else SOLVE_FLOW_FIXES)
        key = next(k for k, name in FLOW_PARTS.items() if name == est.largest)
        if what is None:
            sizes = f"--n {self.n} --d {self.d} --batch {self.batch} --saves {self.saves}"
            what = sizes if self.flags else "solve_flow"
        check_memory(est, what=what, fix=fixes[key], available=available)
        return est
