"""Old names keep working for one version, with a DeprecationWarning that names the new one."""

import numpy as np
import pytest

from rankdyn.flow import FlowField, FlowObserver, solve_flow
from rankdyn.masks import causal_mask


def test_solve_flow_observer_and_values_are_deprecated_spellings():
    field = FlowField(causal_mask(3), 2, "sa")
    x0 = np.array([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], [[0.6, 0.8], [0.0, 1.0], [0.8, -0.6]]])
    kw = dict(t1=1.0, beta=1.0, saves=3, per_trajectory=True)
    new = solve_flow(field, x0, observe=FlowObserver(), **kw)
    with pytest.warns(DeprecationWarning, match=r"observer=\) is deprecated.*use observe="):
        old = solve_flow(field, x0, observer=FlowObserver(), **kw)
    assert set(new.metrics) == set(old.metrics) and "clusters" in new.metrics
    for k in new.metrics:
        np.testing.assert_array_equal(np.asarray(new.metrics[k]), np.asarray(old.metrics[k]))
    with pytest.warns(DeprecationWarning, match="FlowSolution.values is deprecated.*metrics"):
        assert old.values is old.metrics
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
        solve_flow(field, x0, observe=FlowObserver(), observer=FlowObserver(), **kw)


def test_cli_norm_is_a_deprecated_spelling_of_placement(capsys):
    from rankdyn.cli import build_parser

    parse = build_parser().parse_args
    with pytest.warns(DeprecationWarning, match="--norm is deprecated.*use --placement"):
        old = parse(["simulate", "--norm", "pre"])
    assert "warning: --norm is deprecated" in capsys.readouterr().err  # a shell user sees it
    assert old.placement == parse(["simulate", "--placement", "pre"]).placement == "pre"
    assert capsys.readouterr().err == ""  # the flag itself is silent
