"""Whether a given ``--seed`` is read: a seed that changes nothing is refused, not recorded.

The fixed-point commands (``equilibria``, ``continue``) run on models that may draw no random
weights (the default bidiagonal $W_V$ with ``--qk zero``) and an exact census that draws no random
starts; such a seed used to be written into the results as if it had made them.
"""

from __future__ import annotations

from collections.abc import Callable

from .._errors import UsageError

__all__ = ["refuse_unread_seed"]


def refuse_unread_seed(build: Callable, random_starts: bool, census: bool = True) -> None:
    """Refuse ``--seed`` when ``build(key)`` gives the same layer from two keys and nothing else
    draws from the seed (``random_starts`` False: the exact census, or no census with ``census``
    False, e.g. starts read from a file).

    Raises:
        UsageError: naming ``--seed`` and the flags that would read it.
    """
    if random_starts:
        return
    import equinox as eqx
    import jax
    import jax.random as jr
    import numpy as np

    a, b = (build(jr.key(s)) for s in (0, 1))
    leaves = zip(*(jax.tree.leaves(eqx.filter(x, eqx.is_array)) for x in (a, b)))
    if all(np.array_equal(u, v) for u, v in leaves):
        raise UsageError(
            "--seed is ignored here: this model draws no random weights"
            + (" and the census is exact (no random starts)" if census else "")
            + "; drop it (or choose a random --value or --qk)."
        )
