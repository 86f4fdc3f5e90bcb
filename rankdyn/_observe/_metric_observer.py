r"""What is recorded at each saved layer: a chosen subset of the collapse metrics.

The metrics are those of `rankdyn.collapse_metrics` (``docs/theory.md#metrics``): $\mu$ of
eq. (4) and its scale-free forms, token norms, cosines, and the singular-value measures, plus
``eps_min`` (Theorem 1's $\epsilon$, recorded by the depth scan itself). A subset really skips
work: the batched SVD, the expensive part on CPUs, is only traced when a spectral metric is asked.
"""

from __future__ import annotations

from collections.abc import Iterable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import UsageError
from ._metrics import METRIC_NAMES, collapse_metrics, direction_metrics
from ._names import (
    ALL_METRICS as ALL_METRICS,
    CHEAP_METRICS as CHEAP_METRICS,
    SPECTRAL_METRICS as SPECTRAL_METRICS,
    parse_metrics as parse_metrics,
)
from ._tolerances import RANK_TOL

__all__ = [
    "MetricObserver",
    "check_observer",
    "ALL_METRICS",
    "SPECTRAL_METRICS",
    "CHEAP_METRICS",
    "parse_metrics",
]

# SPECTRAL_METRICS and CHEAP_METRICS live in `_names` (JAX-free: the CLI's checks read them).


class MetricObserver(eqx.Module):
    """``(t, x, args) -> {name: scalar}`` for a subset of `METRIC_NAMES` of one ``(n, d)`` state.

    The observer signature of every recording entry point (`rankdyn.simulate`, the sweeps,
    `rankdyn.flow.solve_flow`), after Diffrax's ``SaveAt(fn=...)``: ``t`` is the layer index (or
    the flow's time), ``x`` one trajectory's tokens, ``args`` the layer (or the flow's inverse
    temperature). These metrics read ``x`` only.

    A Module, so that equal observers (same names, any ``rank_tol``) reuse one compiled program.

    Attributes:
        names: the metrics to compute (``eps_min`` is ignored here: the scan records it).
        rank_tol: relative tolerance of the numerical rank.
    """

    rank_tol: Float[Array, ""]
    names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, names: Iterable[str] = METRIC_NAMES, rank_tol: float = RANK_TOL):
        self.names = tuple(k for k in names if k != "eps_min")
        bad = [k for k in self.names if k not in METRIC_NAMES]
        if bad:
            raise UsageError(f"unknown metric {bad[0]!r}; valid names: {', '.join(METRIC_NAMES)}.")
        self.rank_tol = jnp.asarray(rank_tol)

    def __call__(self, t, x: Float[Array, "n d"], args=None) -> dict[str, Float[Array, ""]]:
        del t, args  # the collapse metrics are functions of the tokens alone
        if any(k in SPECTRAL_METRICS for k in self.names):
            out = collapse_metrics(x, self.rank_tol)
        else:
            # No SVD in the program; XLA drops the unused direction metrics too.
            out = direction_metrics(x) if self.names else {}
        return {k: out[k] for k in self.names}


#: Observers already checked (by identity, shapes and dtype): tracing one costs as much as
#: tracing the metrics, and experiments call the entry points many times with one function.
_CHECKED: dict = {}


def check_observer(observe, t, x, args, *, what: str, args_name: str) -> None:
    """``observe(t, x, args)`` maps one state to a dict of arrays (checked abstractly), or a
    UsageError naming ``observe=`` and the signature.

    Arguments:
        observe: the user's observer.
        t, x, args: an example time (or layer index), one ``(n, d)`` state and the arguments,
            as `jax.ShapeDtypeStruct` or arrays (only their shapes and dtypes are used).
        what: the entry point, for the message (``"simulate"``).
        args_name: what ``args`` is there (``"the layer"``), for the message.
    """
    if not callable(observe):
        raise UsageError(
            f"{what}(observe=...) must be a function (t, x, args) -> dict of arrays, got "
            f"{type(observe).__name__}."
        )
    try:
        key = (observe, what, tuple(x.shape), str(x.dtype))
        if key in _CHECKED:
            return
    except TypeError:  # unhashable (e.g. a module holding arrays): check every time
        key = None
    sig = f"observe(t, x, args) with t the {'time' if what == 'solve_flow' else 'layer index'}, x one"
    try:
        out = jax.eval_shape(observe, t, x, args)
    except Exception as err:  # the user's function failed on one state: name it
        raise UsageError(
            f"{what}: observe failed on one {tuple(x.shape)} token matrix ({type(err).__name__}: {err}); "
            f"it is called as {sig} {tuple(x.shape)} token matrix (not a batch) and args {args_name}."
        ) from err
    if not isinstance(out, dict) or not all(
        isinstance(k, str) and isinstance(v, jax.ShapeDtypeStruct) for k, v in out.items()
    ):
        raise UsageError(
            f"{what}: observe must return a dict of arrays (name -> value), got {type(out).__name__}; "
            "e.g. observe=lambda t, x, args: {'mu': rankdyn.metrics.mu(x)}."
        )
    if key is not None and len(_CHECKED) < 256:
        _CHECKED[key] = True
