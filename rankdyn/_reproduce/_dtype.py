"""Dtype policy of the reproduce targets.

float64 when the user turned x64 on (CLI ``--x64``), else float32; library code never changes
JAX's configuration, it only reads it.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from .._observe._tolerances import fit_floor

__all__ = ["float_dtype", "rel_floor", "compute_float64"]


def float_dtype():
    """float64 if JAX runs with x64 enabled, else float32."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def rel_floor(dtype) -> float:
    """Relative floor of the rate fits: below ``mu_rel`` of this size, mu is noise
    (`rankdyn._observe._tolerances.fit_floor`)."""
    return fit_floor(jnp.dtype(dtype))


def compute_float64(out, compute, sizes: dict, seed: int):
    """Create ``out`` and run a target's ``compute(sizes, seed)`` in float64, for the targets whose
    tolerances are float64 ones (the flow, theory and undirected targets, whatever ``--x64`` says);
    returns ``(Path(out), measured)``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with jax.enable_x64(True):
        return out, compute(sizes, seed)
