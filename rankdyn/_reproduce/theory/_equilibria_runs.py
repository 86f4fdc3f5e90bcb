"""The runs of `equilibria_ranks`: every closed-form equilibrium at one $(N, w)$ with its measured
properties, and the exact census that must contain them, as typed results."""

from __future__ import annotations

import dataclasses
import itertools

import jax.numpy as jnp
import numpy as np

from ..._run._io import to_jsonable
from .._target import Measured, off_json

__all__ = ["np_map", "census_table", "analyse", "Census", "RankSummary", "RankFamily", "rank_family"]


def _distinct(xs: np.ndarray, atol: float = 1e-9) -> int:
    """Number of distinct matrices in ``xs`` (pairwise max-abs distance > atol)."""
    flat = xs.reshape(xs.shape[0], -1)
    dist = np.max(np.abs(flat[:, None] - flat[None]), axis=-1)
    # Greedy: count representatives (an equilibrium equal to an earlier one is a duplicate).
    dup = np.any(np.tril(dist <= atol, k=-1), axis=1)
    return int(np.sum(~dup))


def np_map(x: np.ndarray, w: float) -> np.ndarray:
    r"""The paper's map in NumPy (eq. 3 with uniform causal attention):
    $F(X)_i = \mathrm{LN}(\sum_{j \le i} X_j (I + wS))$."""
    d = x.shape[-1]
    y = np.cumsum(x, axis=-2) @ (np.eye(d) + w * np.eye(d, k=1))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def census_table(n: int, w: float) -> dict:
    """The exact census at ``(n, n, w)``: classes (modulo sign) per rank and stability class."""
    import jax.random as jr

    from ..._model._weights import bidiagonal
    from ..._theory._constructions import all_closed_form_equilibria, uniform_causal_layer
    from ...equilibria import equilibrium_census

    layer = uniform_causal_layer(n, n, bidiagonal(n, w))
    c = equilibrium_census(layer, jr.key(0), closed_forms=all_closed_form_equilibria(n, n, w), progress=False)
    xs = np.stack([e.tokens for e in c.equilibria])
    closed = np.stack([np.asarray(x) for _, x in all_closed_form_equilibria(n, n, w)])
    # Independent evidence: every census member is a fixed point of the NumPy map, and every
    # closed form (both signs) is a census member up to the sign flip.
    dist = np.minimum(
        np.abs(closed[:, None] - xs[None]).max(axis=(2, 3)),
        np.abs(closed[:, None] + xs[None]).max(axis=(2, 3)),
    )
    return {
        "method": c.method,
        "classes": len(xs),
        "members": c.completeness.get("members"),
        "by_rank": c.by_rank,
        "by_rank_and_class": c.by_rank_and_class,
        "closed_form_classes_by_rank": {k: v["found"] for k, v in c.closed_forms["by_rank"].items()},
        "max_numpy_residual": float(np.abs(np_map(xs, w) - xs).max()),
        "max_error_estimate": float(max(e.error_estimate for e in c.equilibria)),
        "closed_forms_in_census": bool(dist.min(axis=1).max() < 1e-12),
        "seconds": c.timing["search_s"] + c.timing["stability_s"],
    }


def analyse(n: int, d: int, w: float, *, rank_tol: float = 1e-13, stab_tol: float = 1e-6) -> dict:
    r"""All closed-form equilibria at ``(n, d, w)`` and their measured properties.

    The residuals are those of an independent NumPy map (`np_map`); the multipliers come from
    `rankdyn._equilibria.stability` on all points at once (one compiled, vmapped program).

    Returns:
        dict of per-equilibrium arrays: ``k``, ``residual``, ``rank``, ``stable_rank``,
        ``bound_projected`` ($N / \sum_i X_{i,d}^2$, our bound for every $k$ from
        $\|X\|_2^2 \ge \|X e_d\|^2$), ``spectral_radius``, ``classification``,
        ``unstable_dims``, ``contracting_dims``; plus ``bound_full_rank`` (App. F.2) and the
        per-rank ``count`` / ``distinct``.
    """
    from ..._model._weights import bidiagonal
    from ..._theory._constructions import rank_k_equilibrium, uniform_causal_layer
    from ...equilibria import stability

    # Every sign choice (s_0, s_{c+1..n}) of every valid rank, without deduplication: that
    # the 2^k choices give 2^k distinct points is one of the things measured.
    eqs = [
        (k, np.asarray(rank_k_equilibrium(n, d, k, w, signs=bits)))
        for k in range(1, min(n, d) + 1)
        if k == 1 or w >= n - k + 1
        for bits in itertools.product((1.0, -1.0), repeat=k)
    ]
    ks = np.array([k for k, _ in eqs])
    xn = np.stack([x for _, x in eqs])
    layer = uniform_causal_layer(n, d, bidiagonal(d, w))
    # The residual under an independent NumPy map (eq. 3 with uniform causal attention), not
    # the library's layer: the closed forms must not vouch for themselves.
    res = np.linalg.norm((np_map(xn, w) - xn).reshape(len(xn), -1), axis=-1)
    s = np.linalg.svd(xn, compute_uv=False)
    # Relative tolerance 1e-13: the k-th singular value of a rank-k equilibrium is ~w^-(k-1)
    # relative to the first (1.8e-11 at N = 8, w = 16), the (k+1)-th is at rounding level (< 1e-16).
    rank = np.sum(s > rank_tol * s[:, :1], axis=-1)
    sk = s[np.arange(len(ks)), ks - 1] / s[:, 0]
    sk1 = np.where(ks < s.shape[1], s[np.arange(len(ks)), np.minimum(ks, s.shape[1] - 1)] / s[:, 0], 0.0)
    srank = np.sum(s**2, axis=-1) / s[:, 0] ** 2
    proj = n / np.sum(xn[:, :, -1] ** 2, axis=-1)
    # One compiled, vmapped stability program for all points (rankdyn._equilibria.stability).
    reps = stability(layer, jnp.asarray(xn), tol=stab_tol)
    rho = reps.spectral_radius.tolist()
    cls = reps.classification.tolist()
    unstable = reps.unstable_dims.tolist()
    # Neutral/contracting multipliers are counted with a looser 1e-2: the multiplier 1 is
    # defective (a Jordan block of size up to d - 1) and rounding spreads it by ~eps^(1/(d-1)).
    neutral = np.sum(np.abs(reps.moduli - 1) <= 1e-2, axis=-1).tolist()
    contracting = np.sum(reps.moduli < 1 - 1e-2, axis=-1).tolist()
    per_k = {}
    for k in range(1, n + 1):
        sel = ks == k
        per_k[k] = {
            "count": int(sel.sum()),
            "distinct": _distinct(xn[sel]) if sel.any() else 0,
            "expected": 2**k,
        }
    return {
        "n": n,
        "d": d,
        "w": float(w),
        "k": ks,
        "residual": res,
        "rank": rank,
        "sigma_k_rel": sk,
        "sigma_k1_rel": sk1,
        "stable_rank": srank,
        "bound_projected": proj,
        "bound_full_rank": n / (n - (n - 1) / w**2),
        "spectral_radius": np.array(rho),
        "classification": np.array(cls),
        "unstable_dims": np.array(unstable),
        "neutral_dims": np.array(neutral),
        "contracting_dims": np.array(contracting),
        "per_k": per_k,
        "states": xn,
    }


@dataclasses.dataclass(frozen=True)
class Census(Measured):
    """The exact census at one $(N, w)$ (`census_table`): classes modulo the sign flip per rank
    and stability class, and whether every closed form is among them."""

    method: str
    classes: int
    members: int | None
    by_rank: dict[str, int]
    by_rank_and_class: dict[str, dict[str, int]]
    closed_form_classes_by_rank: dict[str, int]
    max_numpy_residual: float
    max_error_estimate: float
    closed_forms_in_census: bool
    seconds: float


#: JSON names of the `RankSummary` fields that are not Python identifiers.
_SUMMARY_JSON_NAMES = {"expected": "expected_2^k", "max_sigma_k1_over_sigma_1": "max_sigma_k+1_over_sigma_1"}


@dataclasses.dataclass(frozen=True)
class RankSummary(Measured):
    """The closed-form equilibria of one rank $k$ at one $(N, w)$: counts, residual, ranks,
    stable ranks and multipliers (min / max over the sign choices)."""

    count: int
    distinct: int
    expected: int
    max_residual: float
    ranks: list[int]
    min_sigma_k_over_sigma_1: float
    max_sigma_k1_over_sigma_1: float
    stable_rank_min_max: tuple[float, float]
    projected_bound_ok: bool
    spectral_radius_min_max: tuple[float, float]
    classification: dict[str, int]
    min_contracting_dims: int

    def to_dict(self) -> dict:
        d = super().to_dict()
        return {_SUMMARY_JSON_NAMES.get(k, k): v for k, v in d.items()}


@dataclasses.dataclass(frozen=True)
class RankFamily(Measured):
    """Every closed-form equilibrium at one $(N = d, w)$: per rank a `RankSummary`, the App. F.2
    bound of the full-rank ones, and the exact census (None beyond ``CENSUS_MAX_N``).

    The `off_json` field ``arrays`` holds the per-equilibrium arrays of `analyse` (``k``, ``stable_rank``,
    ``spectral_radius``, ``classification``, ``neutral_dims``, ``contracting_dims``,
    ``sigma_k_rel``), which the figure and the notes read.
    """

    n: int
    w: float
    per_k: dict[int, RankSummary]
    full_rank_stable_rank_max: float
    full_rank_bound: float
    full_rank_bound_holds: bool
    full_rank_all_unstable: bool
    census: Census | None = None
    arrays: dict | None = off_json(default=None, repr=False, compare=False)

    @property
    def key(self) -> str:
        """The family's key in the JSON, e.g. ``"N=d=4, w=4"``."""
        return f"N=d={self.n}, w={self.w:g}"

    def to_dict(self) -> dict:
        out = {f"k={k}": s.to_dict() for k, s in self.per_k.items()}
        out.update(
            full_rank_stable_rank_max=self.full_rank_stable_rank_max,
            full_rank_bound=self.full_rank_bound,
            full_rank_bound_holds=self.full_rank_bound_holds,
            full_rank_all_unstable=self.full_rank_all_unstable,
        )
        if self.census is not None:
            out["census"] = self.census.to_dict()
        return to_jsonable(out)


def _rank_summary(r: dict, k: int) -> RankSummary:
    sel = r["k"] == k
    pk = r["per_k"][k]
    cls, cnt = np.unique(r["classification"][sel], return_counts=True)
    return RankSummary(
        count=pk["count"],
        distinct=pk["distinct"],
        expected=pk["expected"],
        max_residual=float(r["residual"][sel].max()),
        ranks=sorted(set(int(v) for v in r["rank"][sel])),
        min_sigma_k_over_sigma_1=float(r["sigma_k_rel"][sel].min()),
        max_sigma_k1_over_sigma_1=float(r["sigma_k1_rel"][sel].max()),
        stable_rank_min_max=(float(r["stable_rank"][sel].min()), float(r["stable_rank"][sel].max())),
        projected_bound_ok=bool(np.all(r["stable_rank"][sel] <= r["bound_projected"][sel] + 1e-12)),
        spectral_radius_min_max=(
            float(r["spectral_radius"][sel].min()),
            float(r["spectral_radius"][sel].max()),
        ),
        classification={str(c): int(m) for c, m in zip(cls, cnt)},
        min_contracting_dims=int(r["contracting_dims"][sel].min()),
    )


def rank_family(n: int, w: float, *, census_max_n: int) -> RankFamily:
    """`analyse` at ``(n, n, w)`` as a `RankFamily`, with the exact census when ``n <= census_max_n``."""
    r = analyse(n, n, w)
    full = r["k"] == n
    keep = ("k", "stable_rank", "spectral_radius", "classification", "neutral_dims", "contracting_dims")
    keep += ("sigma_k_rel",)
    return RankFamily(
        n=n,
        w=float(w),
        per_k={k: _rank_summary(r, k) for k in range(1, n + 1)},
        full_rank_stable_rank_max=float(r["stable_rank"][full].max()),
        full_rank_bound=r["bound_full_rank"],
        full_rank_bound_holds=bool(np.all(r["stable_rank"][full] <= r["bound_full_rank"] + 1e-12)),
        full_rank_all_unstable=bool(np.all(r["classification"][full] == "unstable")),
        # The exact census (an independent derivation: token-by-token polynomial roots) must
        # contain every closed form and shows how many equilibria lie beyond them. Up to N = 6
        # (950 equilibria at w = 7; N = 8 has ~14 000, minutes of stability work).
        census=Census(**census_table(n, w)) if n <= census_max_n else None,
        arrays={k: r[k] for k in keep},
    )
