r"""Stored certificates of the ``undirected`` target: stable rank-2 equilibria re-proven at every run.

The search for a stable higher-rank state is chaotic: a change in the last bits of one product
(another GEMM order, another chunk size) sends it to another $W_V$, and a run may not find again
what an earlier one found. A certificate, though, is a proof that does not depend on how its point
was found: for the float64 weights (exact rationals) and the stored point $\tilde X$, the interval
Krawczyk test proves that an equilibrium $X^*$ lies in $\tilde X + [-r, r]^{nd}$, and the interval
bound on $\rho(DF)$ over that box proves $\rho(DF(X^*)) < 1$ (`rankdyn._theory._certificates`). So the
target ships the certificates its searches produced (``data/undirected_certificates.json``) and
re-runs both interval tests on each, in mpmath, every time it runs. The rank of $X^*$ is that of
$\tilde X$ (its second singular value exceeds $r\sqrt{nd}$ by many orders).
"""

from __future__ import annotations

from importlib import resources

import numpy as np

from .. import _verdict as V

#: The shipped certificates file, inside this package.
_FILE = "data/undirected_certificates.json"

__all__ = ["load", "recheck", "stored_check", "stored_notes", "found_sentences"]


def load(max_n: int | None = None, path=None) -> list[dict]:
    """The stored certificates (``max_n``: only those with ``N <= max_n``, to bound the cost).

    ``path``: another certificates file (default: the one shipped with rankdyn). The file is
    validated first (`validated_certificates`: schema, labels against weights and mask, no
    duplicates); a missing or empty file raises, it is never a verdict.
    """
    from pathlib import Path

    from ._certificate_file import CertificateFileError, validated_certificates

    source = Path(path) if path is not None else resources.files(__package__).joinpath(_FILE)
    try:
        text = source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise CertificateFileError(f"{source}: cannot read the certificates file ({err}).") from None
    certs = validated_certificates(text, str(source))
    return [c for c in certs if max_n is None or len(c["point"]) <= max_n]


def recheck(certs: list[dict]) -> list[dict]:
    """Re-run the existence and stability proofs of each stored certificate in mpmath.

    Returns:
        Per certificate: ``setting``, ``run`` (which run found it), ``existence_proven``,
        ``stability_proven`` (bound < 1), ``spectral_radius_bound`` (str), ``sigma_2`` of the
        point (float64), ``rank_ge2`` (sigma_2 > 1e-6, far above the box's radius) and
        ``undirected`` (the mask is symmetric).
    """
    from ..._theory._certificates import prove, weights_from_hex

    out = []
    for c in certs:
        pr = prove(c["point"], weights_from_hex(c["weights"]), c["radius"])
        s = np.linalg.svd(np.array([[float(v) for v in row] for row in c["point"]]), compute_uv=False)
        mask = np.asarray(c["weights"]["mask"], dtype=bool)
        out.append(
            dict(
                setting=c["setting"],
                run=c["run"],
                existence_proven=bool(pr["proven"]),
                stability_proven=pr["stability_proven"],
                spectral_radius_bound=pr["spectral_radius_bound"],
                sigma_2=float(s[1]),
                rank_ge2=bool(s[1] > 1e-6),
                undirected=bool(np.array_equal(mask, mask.T)),
            )
        )
    return out


def _reproven(stored) -> list[dict]:
    return [c for c in stored if c["stability_proven"] and c["rank_ge2"] and c["undirected"]]


def found_sentences(stored) -> list[str]:
    """One finding per re-proven stored certificate (the target's ``found`` list)."""
    out = []
    for c in _reproven(stored):
        n, mask, att = c["setting"].removeprefix("N=").split("/")
        out.append(f"N = d = {n}, {mask} mask, {att} attention (stored certificate, {c['run']} run)")
    return out


def stored_check(stored) -> V.Check:
    """Every stored certificate re-proves (a wrong map, weight or point fails its interval test)."""
    ok = _reproven(stored)
    return V.check(
        "every stored certificate re-proves: existence and stability (intervals), rank >= 2, undirected mask",
        len(ok) == len(stored),
        f"{len(ok)} of {len(stored)}: "
        + ", ".join(f"{c['setting']} bound {c['spectral_radius_bound'][:6]}" for c in stored),
    )


def stored_notes(stored) -> str:
    """The notes' sentence on the stored certificates (empty when none was re-checked)."""
    if not stored:
        return ""
    ok = _reproven(stored)
    return (
        " Stored certificates (found by earlier runs of this search, which is chaotic: a change in the "
        f"last bits of a product can send it elsewhere): {len(ok)} of {len(stored)} re-proven in this run, "
        "existence and stability by intervals (" + ", ".join(c["setting"] for c in ok) + ")."
    )
