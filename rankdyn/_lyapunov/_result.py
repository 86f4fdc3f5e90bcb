r"""`LyapunovResult`: the spectrum of a batch of trajectories, its convergence and its flags.

The exponents are $\lambda_i = \lim_{T\to\infty} \frac1T \sum_{s} \log |R^{(s)}_{ii}|$ (natural log,
per layer or step; per unit time for the flow), sorted in descending order. Trajectories whose
tangent vectors underflowed or became non-finite are flagged (``flags``) and left out of the
batch statistics, never averaged in silently.
"""

from __future__ import annotations

import equinox as eqx
import numpy as np
from jaxtyping import Array, Float, Int

__all__ = ["LyapunovResult", "FLAG_UNDERFLOW", "FLAG_NONFINITE", "flag_names"]

#: Bit set in ``flags`` when a diagonal entry of R fell below the dtype's smallest normal
#: number (a tangent direction contracted past what the dtype holds between two QR steps).
FLAG_UNDERFLOW = 1
#: Bit set in ``flags`` when the state or the tangent vectors became NaN or infinite.
FLAG_NONFINITE = 2


def flag_names(code: int) -> list[str]:
    """The names of the bits set in one trajectory's flag code (``[]`` when it is clean)."""
    code = int(code)
    return [
        name for bit, name in ((FLAG_UNDERFLOW, "underflow"), (FLAG_NONFINITE, "nonfinite")) if code & bit
    ]


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
        flags: ``(*batch,)`` bit codes: `FLAG_UNDERFLOW`, `FLAG_NONFINITE` (0 = clean).
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
    flags: Int[Array, "*batch"]
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
    def num_flagged(self) -> int:
        return int(np.sum(np.asarray(self.flags) != 0))

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
