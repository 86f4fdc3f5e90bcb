r"""`LyapunovResult`: the spectrum of a batch of trajectories, its convergence and its flags.

The exponents are $\lambda_i = \lim_{T\to\infty} \frac1T \sum_{s} \log |R^{(s)}_{ii}|$ (natural log,
per layer or step; per unit time for the flow), sorted in descending order. Trajectories whose
tangent vectors underflowed or became non-finite have a status other than ``successful``
(``result``) and are left out of the batch statistics, never averaged in silently.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float, Int

__all__ = [
    "LyapunovResult",
    "FLAG_UNDERFLOW",
    "FLAG_NONFINITE",
    "NEUTRAL_TOL",
    "exponent_roles",
    "flag_names",
    "flags_result",
]

#: Bit set in the QR scan's flags (and in ``LyapunovResult.flags`` where ``result`` is
#: ``underflow``) when a diagonal entry of R fell below the dtype's smallest normal number (a
#: tangent direction contracted past what the dtype holds between two QR steps).
FLAG_UNDERFLOW = 1
#: Bit set when the state or the tangent vectors became NaN or infinite (``result`` ``nonfinite``).
FLAG_NONFINITE = 2


#: An exponent with |lambda| at most this (per layer, step or unit time) is "neutral" whatever the
#: run's length: its factor e^lambda is within 0.1% of 1.
NEUTRAL_TOL = 1e-3


def exponent_roles(mean, dtype, horizon: float | int) -> list[str]:
    r"""What each exponent says, by a rule fixed in advance (docs/glossary.md):

    - ``"rounding-limited"``: $\lambda < \log \varepsilon$ of the dtype (float32: -15.9 per
      step): one step contracts that direction by more than the dtype's relative precision, so
      the value is set by rounding and is only an upper bound on the true rate;
    - ``"neutral"``: $|\lambda| \le \max(10^{-3}, \log 10 / T)$ with $T$ the ``horizon`` the
      exponents were averaged over: the direction neither contracts nor expands by more than a
      factor of 10 over the whole run (a finite-time estimate of a zero exponent is $O(1/T)$). For
      a collapsed state on the spheres these are the $d - 1$ rotations of the common point;
    - ``"contracting"``: the transverse, collapsing directions ($e^\lambda < 1$ per step);
    - ``"expanding"``: $e^\lambda > 1$ per step.
    """
    floor = float(np.log(np.finfo(np.dtype(dtype)).eps))
    neutral = max(NEUTRAL_TOL, float(np.log(10.0)) / max(float(horizon), 1e-300))
    roles = []
    for v in np.asarray(mean, dtype=float):
        if not np.isfinite(v):
            roles.append("not finite")
        elif v < floor:
            roles.append("rounding-limited")
        elif abs(v) <= neutral:
            roles.append("neutral")
        else:
            roles.append("contracting" if v < 0 else "expanding")
    return roles


def flag_names(code: int) -> list[str]:
    """The names of the bits set in one trajectory's flag code (``[]`` when it is clean)."""
    code = int(code)
    return [
        name for bit, name in ((FLAG_UNDERFLOW, "underflow"), (FLAG_NONFINITE, "nonfinite")) if code & bit
    ]


def flags_result(flags):
    """Each trajectory's `rankdyn.RESULTS` member from the QR scan's bit codes: ``nonfinite``
    where `FLAG_NONFINITE` is set (whatever else is), else ``underflow`` where `FLAG_UNDERFLOW`
    is, else ``successful``. On the host when concrete (no program compiles)."""
    from .._results import RESULTS, results_where  # Optimistix and Diffrax load only when used

    flags = flags if isinstance(flags, jax.core.Tracer) else np.asarray(flags)
    under = results_where((flags & FLAG_UNDERFLOW) != 0, RESULTS.underflow, RESULTS.successful)
    return results_where((flags & FLAG_NONFINITE) != 0, RESULTS.nonfinite, under)


class LyapunovResult(eqx.Module):
    r"""What `rankdyn.lyapunov_spectrum` (and the map and flow versions) return.

    Attributes:
        exponents: ``(*batch, k)`` per trajectory, sorted in descending order; natural log per
            layer (per step of a map, per unit time for the flow). Flagged trajectories keep
            their (untrustworthy) values here and are left out of ``mean`` etc.
        depths: ``(R,)`` the depths (layers, steps or times) of the running estimates.
        running_mean, running_std, running_min, running_max: ``(R, k)`` batch statistics of the
            running estimates at ``depths`` (each trajectory's estimate sorted), to judge
            convergence.
        mean, std, min, max: ``(k,)`` batch statistics of ``exponents`` over unflagged trajectories.
        count: how many trajectories entered the statistics.
        result: ``(*batch,)`` each trajectory's status, a member of the one `rankdyn.RESULTS`:
            ``nonfinite`` where the state or the tangent vectors became NaN or infinite, else
            ``underflow`` where a diagonal entry of R fell below the dtype's smallest normal
            number, else ``successful`` (only these enter the statistics). The property
            ``flags`` gives it as bit codes (`FLAG_NONFINITE`, `FLAG_UNDERFLOW`, 0 = clean).
        space: ``"tangent"`` (product of spheres, dimension $n(d-1)$), ``"full"`` ($\mathbb R^{nd}$)
            or ``"map"`` ($\mathbb R^m$ of a generic map).
        dim: the dimension of that space (the largest possible k).
        unit: ``"per layer"``, ``"per step"`` or ``"per unit time"``.
        num_steps, discard, qr_every: the run's depth, the steps left out before accumulating,
            and the steps between re-orthonormalisations (an integer, or ``"auto"``).
    """

    exponents: Float[Array, "*batch k"]
    depths: Float[Array, " r"]
    running_mean: Float[Array, "r k"]
    running_std: Float[Array, "r k"]
    running_min: Float[Array, "r k"]
    running_max: Float[Array, "r k"]
    mean: Float[Array, " k"]
    std: Float[Array, " k"]
    min: Float[Array, " k"]
    max: Float[Array, " k"]
    count: Int[Array, ""]
    # A `rankdyn.RESULTS` member (Any: rankdyn/_results.py imports Optimistix and Diffrax).
    result: Any
    space: str = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    unit: str = eqx.field(static=True)
    num_steps: float = eqx.field(static=True)
    discard: float = eqx.field(static=True)
    qr_every: int | str = eqx.field(static=True)

    @property
    def k(self) -> int:
        return int(self.exponents.shape[-1])

    @property
    def flags(self) -> Int[np.ndarray, "*batch"]:
        """``(*batch,)`` ``result`` as bit codes: `FLAG_NONFINITE` where it is ``nonfinite``,
        `FLAG_UNDERFLOW` where it is ``underflow``, 0 where it is ``successful``."""
        from .._results import RESULTS, results_in

        nonfinite = np.asarray(results_in(self.result, RESULTS.nonfinite))
        under = np.asarray(results_in(self.result, RESULTS.underflow))
        return np.where(nonfinite, FLAG_NONFINITE, np.where(under, FLAG_UNDERFLOW, 0)).astype(np.int32)

    @property
    def num_flagged(self) -> int:
        return int(np.sum(np.asarray(self.flags) != 0))

    def roles(self) -> list[str]:
        """Each mean exponent's role (`exponent_roles`): neutral, contracting, expanding, rounding-limited."""
        return exponent_roles(self.mean, self.exponents.dtype, self.num_steps - self.discard)

    def to_dict(self, per_trajectory: bool = False) -> dict:
        """JSON-ready statistics (and every trajectory's exponents with ``per_trajectory``)."""
        f = lambda a: np.asarray(a, dtype=float).tolist()  # noqa: E731
        out = {
            "space": self.space,
            "dim": self.dim,
            "k": self.k,
            "unit": self.unit,
            "num_steps": self.num_steps,
            "discard": self.discard,
            "qr_every": self.qr_every,
            "count": int(self.count),
            "num_trajectories": int(np.asarray(self.flags).size),
            "num_flagged": self.num_flagged,
            "exponents": {s: f(getattr(self, s)) for s in ("mean", "std", "min", "max")},
            "roles": self.roles(),
            "dtype": str(self.exponents.dtype),
            "sum_mean": float(np.sum(np.asarray(self.mean))),
            "running": {
                "depths": f(self.depths),
                **{s: f(getattr(self, f"running_{s}")) for s in ("mean", "std", "min", "max")},
            },
        }
        if per_trajectory:
            out["per_trajectory"] = {
                "exponents": f(np.asarray(self.exponents).reshape(-1, self.k)),
                "flags": np.asarray(self.flags).reshape(-1).astype(int).tolist(),
            }
        return out
