r"""`CovariantVectors`: covariant Lyapunov vectors along a batch of trajectories, their exponents,
and the angle between the unstable and stable subspaces (`rankdyn._lyapunov._clv`)."""

from __future__ import annotations

import equinox as eqx
import jax
import numpy as np
from jaxtyping import Array, Float, Int

from ._result import FLAG_NONFINITE, FLAG_UNDERFLOW

__all__ = ["CovariantVectors"]


class CovariantVectors(eqx.Module):
    r"""What `rankdyn.covariant_vectors` and `rankdyn.covariant_vectors_map` return.

    Attributes:
        vectors: ``(*batch, T, m, k)`` the covariant vectors $V_t$ at each recorded step, unit
            columns (sign arbitrary), column $j$ that of the $j$-th exponent; flat states
            ($m = nd$ for tokens, tangent to the spheres with post sphere-LN).
        states: ``(*batch, T, *state)`` the state $x_t$ at which each $V_t$ is taken.
        exponents: ``(*batch, k)`` per trajectory, in column order (descending once the forward
            QR has converged): $\frac1T \sum_t \log R_{t+1,jj}$ over the recorded steps.
        angles: ``(*batch, T)`` the smallest principal angle (radians, in $[0, \pi/2]$) between the
            span of the first ``num_unstable`` vectors and the span of the others; NaN where
            either span is empty.
        num_unstable: ``(*batch,)`` how many vectors span the unstable subspace: the exponents
            $> 0$ of each trajectory, or the caller's ``num_unstable``.
        flags: ``(*batch,)`` `rankdyn.lyapunov.FLAG_UNDERFLOW` / `FLAG_NONFINITE` bits (0 = clean);
            ``result`` gives them as `rankdyn.RESULTS` members.
        steps: ``(T,)`` the step (layer) index of each recorded $V_t$.
        space, dim, unit: as `rankdyn.lyapunov.LyapunovResult`.
        num_steps, discard, discard_backward: recorded steps $T$, forward transient, backward
            transient.
    """

    vectors: Float[Array, "*batch t m k"]
    states: Array
    exponents: Float[Array, "*batch k"]
    angles: Float[Array, "*batch t"]
    num_unstable: Int[Array, "*batch"]
    flags: Int[Array, "*batch"]
    steps: Int[Array, " t"]
    space: str = eqx.field(static=True)
    dim: int = eqx.field(static=True)
    unit: str = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)
    discard: int = eqx.field(static=True)
    discard_backward: int = eqx.field(static=True)

    @property
    def k(self) -> int:
        return int(self.exponents.shape[-1])

    @property
    def min_angle(self) -> np.ndarray:
        """``(*batch,)`` the smallest angle along each trajectory (NaN where undefined), NumPy."""
        return np.min(np.asarray(self.angles), axis=-1)

    @property
    def result(self):
        """``(*batch,)`` each trajectory's status in `rankdyn.RESULTS`: ``nonfinite``, else
        ``underflow``, else ``successful`` (as `rankdyn.lyapunov.LyapunovResult.result`)."""
        from .._results import RESULTS, results_where

        flags = self.flags if isinstance(self.flags, jax.core.Tracer) else np.asarray(self.flags)
        under = results_where((flags & FLAG_UNDERFLOW) != 0, RESULTS.underflow, RESULTS.successful)
        return results_where((flags & FLAG_NONFINITE) != 0, RESULTS.nonfinite, under)
