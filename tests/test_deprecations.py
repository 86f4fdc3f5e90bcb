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


def test_solve_flow_time_first_states_are_deprecated():
    """Without batch_first=True the states keep the old (S, batch, n, d) layout, with a warning."""
    field = FlowField(causal_mask(3), 2, "sa")
    x0 = np.array([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], [[0.6, 0.8], [0.0, 1.0], [0.8, -0.6]]])
    kw = dict(t1=1.0, beta=1.0, saves=4, save_states=True)
    new = solve_flow(field, x0, batch_first=True, **kw)
    with pytest.warns(DeprecationWarning, match=r"\(S, batch, n, d\).*batch_first=True"):
        old = solve_flow(field, x0, **kw)
    assert new.states.shape == (2, 4, 3, 2) and old.states.shape == (4, 2, 3, 2)
    np.testing.assert_array_equal(np.asarray(old.states), np.moveaxis(np.asarray(new.states), 0, 1))
    np.testing.assert_allclose(np.asarray(new.states[:, 0]), x0 / np.linalg.norm(x0, axis=-1, keepdims=True))


def test_cli_norm_is_a_deprecated_spelling_of_placement(capsys):
    from rankdyn.cli import build_parser

    parse = build_parser().parse_args
    with pytest.warns(DeprecationWarning, match="--norm is deprecated.*use --placement"):
        old = parse(["simulate", "--norm", "pre"])
    assert "warning: --norm is deprecated" in capsys.readouterr().err  # a shell user sees it
    assert old.placement == parse(["simulate", "--placement", "pre"]).placement == "pre"
    assert capsys.readouterr().err == ""  # the flag itself is silent


def test_stability_of_a_batch_is_one_report_and_the_list_is_deprecated():
    """A batch gives one report with batch axes in front, equal point by point to the one-point ones."""
    import rankdyn as rd

    ex_b = rd.theory.example_2d(2.0)
    layer = rd.theory.uniform_causal_layer(2, 2, ex_b["W_V"])
    xs = np.stack([ex_b["X_B"], ex_b["X_A"]])
    rep = rd.stability(layer, xs)
    assert rep.batch_shape == (2,) and rep.eigenvalues.shape == (2, 2)
    assert rep.classification.tolist() == ["marginal", "unstable"] and rep.unstable_dims.tolist() == [0, 1]
    for i in range(2):
        one = rd.stability(layer, xs[i])
        np.testing.assert_array_equal(rep[i].eigenvalues, one.eigenvalues)
        assert rep[i].to_dict() == one.to_dict()
    assert rd.stability(layer, xs[None]).batch_shape == (1, 2)  # any batch axes
    with pytest.warns(DeprecationWarning, match="iterating over it or taking its len"):
        old = list(rep)
    assert [r.classification for r in old] == ["marginal", "unstable"]
    with pytest.warns(DeprecationWarning):
        assert len(rep) == 2
    with pytest.raises(TypeError):
        len(rd.stability(layer, xs[0]))


def test_census_joint_keywords_are_deprecated(monkeypatch):
    """The joint search's settings go as joint=JointOptions(...); the keywords still work, with a warning.

    The oracle is the settings the joint search receives (the search itself is stopped there): the
    same with the old keywords as with ``joint=JointOptions(**keywords)``, which a dropped,
    renamed or defaulted keyword fails.
    """
    import jax.random as jr

    import rankdyn as rd
    from rankdyn._equilibria import _census

    class Stop(Exception):
        pass

    received = []

    def joint_search(layer, key, group, opts):
        received.append(opts)
        raise Stop

    monkeypatch.setattr(_census, "joint_search", joint_search)
    layer = rd.theory.uniform_causal_layer(2, 2, rd.weights.bidiagonal(2, 2.0))
    kw = dict(search="joint-search", progress=False)
    opts = dict(starts=8, chunk=4, deflation_rounds=0, dedup_tol=1e-3)
    with pytest.raises(Stop):
        rd.equilibrium_census(layer, jr.PRNGKey(0), joint=rd.equilibria.JointOptions(**opts), **kw)
    with pytest.warns(
        DeprecationWarning, match=r"starts=, chunk=, deflation_rounds=, dedup_tol=\) is deprecated"
    ):
        with pytest.raises(Stop):
            rd.equilibrium_census(layer, jr.PRNGKey(0), **opts, **kw)
    # The same settings reach the search either way, each keyword's value (none is a default).
    assert len(received) == 2 and received[0] == received[1]
    assert {k: getattr(received[1], k) for k in opts} == opts
    assert all(opts[k] != getattr(rd.equilibria.JointOptions(), k) for k in opts)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
        rd.equilibrium_census(layer, jr.PRNGKey(0), joint=rd.equilibria.JointOptions(), starts=8, **kw)


def test_flow_names_that_collided_with_equilibria_are_deprecated():
    """rankdyn.flow.find_equilibria / tangent_jacobian (other types than rankdyn.equilibria's) are renamed."""
    import rankdyn.flow as rf

    with pytest.warns(DeprecationWarning, match="flow.find_equilibria is deprecated.*flow.find_zeros"):
        assert rf.find_equilibria is rf.find_zeros
    with pytest.warns(DeprecationWarning, match="flow.tangent_jacobian is deprecated.*flow.field_jacobian"):
        from rankdyn.flow import tangent_jacobian
    assert tangent_jacobian is rf.field_jacobian
    with pytest.raises(AttributeError):
        rf.no_such_name  # noqa: B018


def test_find_equilibria_x0s_is_a_deprecated_spelling_of_x0():
    """The starts are x0 everywhere (simulate, solve_flow, find_equilibria, attractor_census)."""
    import rankdyn as rd

    ex = rd.theory.example_2d(2.0)
    layer = rd.theory.uniform_causal_layer(2, 2, ex["W_V"])
    x0 = np.stack([ex["X_B"], ex["X_A"]])
    new = rd.find_equilibria(layer, x0=x0)
    with pytest.warns(DeprecationWarning, match=r"find_equilibria\(x0s=\) is deprecated.*use x0="):
        old = rd.find_equilibria(layer, x0s=x0)
    np.testing.assert_array_equal(np.asarray(new.x), np.asarray(old.x))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
        rd.find_equilibria(layer, x0, x0s=x0)


def test_dict_style_access_on_typed_results_is_deprecated():
    """``result["x"]``, ``.get``, ``.keys()`` and ``in`` (the dictionaries of 0.2) still read the
    field, with a warning that names the attribute; attributes and ``to_dict()`` stay silent."""
    import dataclasses
    import json
    import warnings

    import jax.random as jr

    import rankdyn as rd

    layer = rd.theory.uniform_causal_layer(2, 2, rd.weights.bidiagonal(2, 2.0))
    census = rd.equilibrium_census(layer, jr.PRNGKey(0), progress=False)
    rec = census.equilibria[0]
    group = rd.equilibria.symmetry_group(layer)
    with pytest.warns(
        DeprecationWarning, match=r"CensusResult\['by_rank'\] .*deprecated.*attribute \.by_rank"
    ):
        assert census["by_rank"] is census.by_rank
    with pytest.warns(DeprecationWarning, match=r"EquilibriumRecord\['tokens'\] .*attribute \.tokens"):
        assert census["equilibria"][0]["tokens"] is rec.tokens
    with pytest.warns(DeprecationWarning, match=r"EquilibriumRecord\.get\('rank'\) .*attribute \.rank"):
        assert rec.get("rank") == rec.rank
    with pytest.warns(DeprecationWarning, match=r"\.get\('no_such_field'\)"):
        assert rec.get("no_such_field", 7) == 7
    with pytest.warns(DeprecationWarning, match=r"SymmetryGroup\.keys\(\) .*dataclasses\.fields"):
        assert group.keys() == tuple(f.name for f in dataclasses.fields(group))
    with pytest.warns(DeprecationWarning, match=r"CensusResult: 'method' in result .*hasattr"):
        assert "method" in census
    with pytest.warns(DeprecationWarning, match="'no_such_field' in result"):
        assert "no_such_field" not in census
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError, match="no_such_field"):
        census["no_such_field"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = census.to_dict()
        assert census.method == d["method"] == "exact" and group.sign == group.to_dict()["sign"]
    # to_dict() is JSON already (the one serialiser): nested records as dicts, arrays as lists.
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["equilibria"][0]["tokens"] == np.asarray(rec.tokens).tolist()
