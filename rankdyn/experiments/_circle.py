"""Helpers of the 2-D example on the circle (`counterexample_2d`): tokens at angles, and the
per-layer observers that follow token 2."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._observers import sigma_ratio as _sigma_ratio

__all__ = ["_tokens", "_observe_token2", "_observe_joint", "_token2", "_observe_noln"]


def _tokens(theta_deg) -> np.ndarray:
    """Unit vectors at the given angles (degrees), stacked on the last axis."""
    th = np.deg2rad(np.asarray(theta_deg, dtype=np.float64))
    return np.stack([np.cos(th), np.sin(th)], axis=-1)


# Observers are module-level functions: `simulate` is jitted with ``observe`` as a static
# argument, so reusing the same function object across w values reuses the compiled program.
def _observe_token2(x):
    # Scalars only (Trajectory.metrics is typed as one scalar per saved layer).
    return {"x21": x[1, 0], "x22": x[1, 1]}


def _observe_joint(x):
    return {"ratio": _sigma_ratio(x), "x21": x[1, 0], "x22": x[1, 1]}


def _token2(metrics, idx):
    """Token 2 at the saved-layer indices ``idx``: ``(..., len(idx), 2)``."""
    return np.stack([np.asarray(metrics["x21"])[..., idx], np.asarray(metrics["x22"])[..., idx]], axis=-1)


def _observe_noln(x):
    from .._metrics import mu

    cos = jnp.dot(x[0], x[1]) / (jnp.linalg.norm(x[0]) * jnp.linalg.norm(x[1]))
    return {"mu": mu(x), "cos": cos}
