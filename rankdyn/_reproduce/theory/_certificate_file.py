r"""Validation of the shipped certificates file of the ``undirected`` target.

The file is trusted by nothing: an empty list would flip the target's verdict to "no evidence
against", a relabelled entry would report a finding under the wrong mask or attention, and a
duplicated one would count twice. So before any proof is re-run, every entry is checked against
the schema and against its own weights:

- ``setting`` is ``N=<n>/<mask>/<attention>``, with $n$ the number of rows of ``point`` and of
  ``mask``;
- the mask label matches the mask: ``complete`` is all ones, ``window`` a band
  $|i - j| \le w$ with $w < n - 1$;
- the attention label matches the logits $x W_Q (x W_K)^\top$: ``uniform`` when
  $W_Q W_K^\top = 0$, ``symmetric`` when $W_Q W_K^\top$ is symmetric, ``generic`` otherwise;
- no two entries hold the same weights and point.
"""

from __future__ import annotations

import json
import re

import numpy as np

__all__ = ["CertificateFileError", "validated_certificates"]

_SETTING = re.compile(r"N=(\d+)/(window|complete)/(uniform|symmetric|generic)")
_KEYS = {"setting": str, "run": str, "radius": str, "weights": dict, "point": list}
_WEIGHT_KEYS = ("mask", "w_q", "w_k", "w_v", "dqk")


class CertificateFileError(ValueError):
    """The certificates file is missing, empty or inconsistent (names the file and the entry)."""


def _matrix(name, value, where) -> np.ndarray:
    try:
        m = np.array([[float.fromhex(v) if isinstance(v, str) else float(v) for v in row] for row in value])
    except (TypeError, ValueError):
        raise CertificateFileError(f"{where}: {name} is not a matrix of float64 hex strings.") from None
    if m.ndim != 2 or not np.all(np.isfinite(m)):
        raise CertificateFileError(f"{where}: {name} is not a finite matrix.")
    return m


def _mask_label(mask: np.ndarray) -> str | None:
    n = mask.shape[0]
    if mask.all():
        return "complete"
    dist = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    for w in range(n - 1):
        if np.array_equal(mask, dist <= w):
            return "window"
    return None


def _attention_label(w_q: np.ndarray, w_k: np.ndarray) -> str:
    a = w_q @ w_k.T  # the logits are x A x^T
    if not np.any(a):
        return "uniform"
    return "symmetric" if np.array_equal(a, a.T) else "generic"


def validated_certificates(text: str, source: str) -> list[dict]:
    """The certificates of the file's ``text``, each checked against its schema and weights.

    Arguments:
        text: the file's content (JSON with a non-empty ``certificates`` list).
        source: the file's name, for the messages.

    Returns:
        The list of certificate dicts, unchanged.

    Raises:
        CertificateFileError: not JSON, no or an empty list, a missing or mistyped key, a label
            that does not match the certificate's own mask or weights, or a duplicated entry.
    """
    try:
        data = json.loads(text)
    except ValueError as err:
        raise CertificateFileError(f"{source}: not valid JSON ({err}).") from None
    certs = data.get("certificates") if isinstance(data, dict) else None
    if not isinstance(certs, list) or not certs:
        raise CertificateFileError(
            f"{source}: no certificates (the key 'certificates' must be a non-empty list); an empty file "
            "is an error, not a verdict. Restore the file shipped with rankdyn."
        )
    seen = {}
    for i, c in enumerate(certs):
        where = f"{source}: certificate {i}"
        if not isinstance(c, dict):
            raise CertificateFileError(f"{where} is not an object.")
        for key, kind in _KEYS.items():
            if not isinstance(c.get(key), kind):
                raise CertificateFileError(f"{where}: key {key!r} missing or not a {kind.__name__}.")
        w = c["weights"]
        if any(k not in w for k in _WEIGHT_KEYS):
            raise CertificateFileError(f"{where}: weights need the keys {', '.join(_WEIGHT_KEYS)}.")
        m = _SETTING.fullmatch(c["setting"])
        if m is None:
            raise CertificateFileError(
                f"{where}: setting {c['setting']!r} is not "
                "N=<n>/<window|complete>/<uniform|symmetric|generic>."
            )
        n, mask_label, att_label = int(m.group(1)), m.group(2), m.group(3)
        mask = np.asarray(w["mask"])
        point = _matrix("point", c["point"], where)
        if mask.dtype != bool or mask.shape != (n, n) or point.shape[0] != n:
            raise CertificateFileError(f"{where}: setting says N={n}, but mask / point have another size.")
        if _mask_label(mask) != mask_label:
            raise CertificateFileError(
                f"{where}: labelled mask {mask_label!r}, but its mask is {_mask_label(mask) or 'neither'}."
            )
        att = _attention_label(_matrix("w_q", w["w_q"], where), _matrix("w_k", w["w_k"], where))
        if att != att_label:
            raise CertificateFileError(
                f"{where}: labelled attention {att_label!r}, but its weights give {att!r}."
            )
        key = json.dumps([w, c["point"]], sort_keys=True)
        if key in seen:
            raise CertificateFileError(
                f"{where} duplicates certificate {seen[key]} (same weights and point)."
            )
        seen[key] = i
    return certs
