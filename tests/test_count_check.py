"""One check of a count (`rankdyn._arguments.check_count`) for the library's arguments, the plans
and the command line's flags: the same rule, the name said the caller's way."""

import re

import numpy as np
import pytest

from rankdyn import UsageError
from rankdyn._arguments import check_count
from rankdyn._run._plan import SimulatePlan


@pytest.mark.parametrize("bad", [2.5, 10.0, "10", True, None, np.float64(3.0)])
def test_a_count_is_an_integer_whoever_asks(bad):
    """``10.0`` reached the plans as a refusal and the library's other counts as a silent ``int``;
    one rule now: a count is an integer (never truncated, never a float in a shape)."""
    with pytest.raises(UsageError, match=re.escape(f"chunk must be an integer >= 1, got {bad!r}")):
        check_count(bad, "chunk")
    with pytest.raises(UsageError, match="--batch .*: expected an integer >= 1"):
        SimulatePlan(n=4, d=4, batch=bad, num_layers=4, flags=True)
    with pytest.raises(UsageError, match=r"num_layers=.*: expected an integer >= 0"):
        SimulatePlan(n=4, d=4, batch=2, num_layers=bad)


def test_bounds_and_naming():
    assert check_count(np.int64(3), "k") == 3 and type(check_count(np.int64(3), "k")) is int
    assert check_count(0, "t", minimum=0) == 0
    with pytest.raises(UsageError, match=r"^period must be at most 64 \(why\), got 65\.$"):
        check_count(65, "period", maximum=64, why=" (why)")
    with pytest.raises(UsageError, match=r"^--max-steps 0: expected an integer >= 1\.$"):
        check_count(0, "max_steps", flags=True)
    with pytest.raises(UsageError, match=r"^\[axes\] batch = 0: expected an integer >= 1\.$"):
        check_count(0, "batch", flags=lambda name, v: f"[axes] {name} = {v}")
