"""Test configuration: float64, strict dtype and rank promotion, and a `getkey` fixture.

Library code never touches JAX's global config; tests choose float64 here
(docs/theory.md#experiments: mu falls below 1e-300 without LN, which float32 cannot represent).
"""

import itertools
import os

import jax
import jax.random as jr
import pytest

# `rankdyn reproduce` caches compiled programs by default; tests count compiles and must not
# depend on what an earlier run left in ~/.cache (subprocesses inherit this too).
os.environ.setdefault("RANKDYN_NO_COMPILE_CACHE", "1")
# The suite is compile-bound: compile at XLA's backend optimisation level 1, as `rankdyn reproduce
# --quick` does (every quick target's numbers were bit-identical to the default level's:
# benchmarks/DEVNOTES.md; about 7% less CPU on test_simulate/test_flow/test_equilibria), unless
# XLA_FLAGS already chooses a level. XLA reads the variable when JAX creates its backend, after this.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=1"
    ).strip()
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def getkey():
    """Call ``getkey()`` for a fresh, deterministic PRNG key."""
    counter = itertools.count()
    return lambda: jr.PRNGKey(next(counter))
