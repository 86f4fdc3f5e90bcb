"""Dtype policy of the reproduce targets.

float64 when the user turned x64 on (CLI ``--x64``), else float32; library code never changes
JAX's configuration, it only reads it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .._floors import fit_floor

__all__ = ["float_dtype", "rel_floor"]


def float_dtype():
    """float64 if JAX runs with x64 enabled, else float32."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def rel_floor(dtype) -> float:
    """Relative floor of the rate fits: below ``mu_rel`` of this size, mu is noise
    (`rankdyn._floors.fit_floor`)."""
    return fit_floor(jnp.dtype(dtype))
