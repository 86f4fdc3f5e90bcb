r"""What a census's search of starts will cost, said before it runs and checked as it goes.

The tree search (`rankdyn._equilibria._tree.tree_search`) solves token $i$ from every partial
equilibrium of tokens $1..i-1$: ``starts`` random starts per partial, 2 to 6 rounds, up to 60
Gauss-Newton steps each. Its cost is that of one start-step times

$$\sum_i p_i \cdot \text{starts} \cdot \text{rounds},$$

and the partial counts $p_i$ grow geometrically with the solutions per token, unknown before
the search: with a Gaussian $W_Q W_K^\top$ at n = d = 6, 2 first tokens had 96 second-token
solutions (48 each), so token 4 would start from ~4600 partials, over a million starts a round
(``rankdyn continue`` was still searching after 11 minutes). So the estimate is made again
before each token, from the partials found so far and the last growth factor, and a search
whose estimate passes the caller's budget is refused at once rather than run for hours.
"""

from __future__ import annotations

import math

from .._errors import UsageError

__all__ = ["tree_seconds", "tree_budget", "SearchTooLong", "TREE_SECONDS_PER_STEP", "START_SEARCH_BUDGET_S"]

#: The start search ``rankdyn continue --start census`` accepts: 5 minutes of estimated time on
#: the 2-core CPU (the estimate's unit was measured there, `TREE_SECONDS_PER_STEP`).
START_SEARCH_BUDGET_S = 300.0


class SearchTooLong(UsageError):
    """A census's search estimated beyond the caller's ``max_seconds``."""


#: Seconds per start and Gauss-Newton step of the tree search at n = d = 6, token 3 (attending
#: to 3 tokens): the seconds of 24576 starts x 60 steps on a shared 2-core CPU, divided by them
#: (measured: benchmarks/README.md). It is scaled by d^2 times the
#: tokens attended to (`tree_seconds`): a token's Jacobian is d x d, each entry a pass over them.
TREE_SECONDS_PER_STEP = 75.2 / (24576 * 60)
_REF_D, _REF_TOKENS = 6, 3
_MIN_ROUNDS, _MAX_STEPS = 2, 60


def tree_seconds(d: int, starts: int, partials: list, first: int = 0) -> float:
    """Estimated seconds of the tree search's tokens ``first, first + 1, ...`` (at least two
    rounds each) from ``partials[j]`` partial equilibria before token ``first + j``."""
    unit = TREE_SECONDS_PER_STEP * (d / _REF_D) ** 2 / _REF_TOKENS
    return sum(p * starts * _MIN_ROUNDS * _MAX_STEPS * unit * (first + j + 1) for j, p in enumerate(partials))


def tree_budget(n: int, d: int, starts: int, max_seconds: float | None, log=None):
    """``before_token(i, p)`` for `tree_search`: logs one line and refuses (UsageError) a search
    whose estimated remaining time exceeds ``max_seconds``, assuming each later token multiplies
    the partials by the growth just seen (by 1 before the second token)."""
    seen: dict[int, int] = {}

    def before_token(i: int, p: int) -> None:
        seen[i] = p
        growth = p / seen[i - 1] if i - 1 in seen and seen[i - 1] > 0 else 1.0
        partials = [p * growth**j for j in range(n - i)]
        est = tree_seconds(d, starts, partials, first=i)
        if log is not None and (i <= 1 or growth > 1):
            log(
                f"start search: tree search, token {i + 1} of {n}: {p} partial equilibria x {starts} "
                f"starts x 2-6 rounds x up to 60 Gauss-Newton steps; {_fmt(est)} left "
                f"(growth {growth:.3g} per token)"
            )
        if max_seconds is not None and est > max_seconds:
            raise SearchTooLong(
                f"the census's tree search would take {_fmt(est)} ({p} partial equilibria at "
                f"token {i + 1} of {n}, growing {growth:.3g}x per token), beyond the budget of "
                f"{max_seconds / 60:g} min"
            )

    return before_token


def _fmt(s: float) -> str:
    if not math.isfinite(s) or s >= 1e7:
        return "more than 100 days"
    return "about " + (
        f"{s:.0f} s" if s < 120 else (f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.0f} h")
    )
