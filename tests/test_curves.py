"""`continue_curve`: codimension-1 bifurcations followed in two parameters, against closed forms.

Oracles: the Henon map x' = 1 - a x^2 + y, y' = b x has its fold curve at a = -(1 - b)^2 / 4 and
its period-doubling curve at a = 3 (1 - b)^2 / 4; the cusp map x' = x + p + q x - x^3 has the fold
curve 27 p^2 = 4 q^3 (x = +-sqrt(q / 3), p = -+2 x^3) with a cusp at the origin;
z' = e^(p + i q) z - |z|^2 z on R^2 has multipliers e^(p +- i q) at z = 0: a Neimark-Sacker curve
p = 0 with kappa = cos(theta) = cos(q).
"""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from test_continuation import P, fam_w, start_a  # noqa: E402 (the layer family's oracle)

from rankdyn._errors import UsageError
from rankdyn._theory._constructions import uniform_causal_layer
from rankdyn.equilibria import continue_branch, continue_curve

B0 = -0.9


def henon2(z, a, b):
    return jnp.stack([1 - a * z[0] ** 2 + z[1], b * z[0]])


def _henon_b0(z, a):
    """Hénon at b = B0: one function for every branch below, so they share compiled programs
    (a lambda made anew at each call compiled them again)."""
    return henon2(z, a, B0)


def _henon_branch(a_end, **kw):
    x = (-(1 - B0) + np.sqrt((1 - B0) ** 2 + 4 * 0.1)) / (2 * 0.1)
    return continue_branch(_henon_b0, np.array([x, B0 * x]), 0.1, a_end, ds=0.1, throw=False, **kw)


@pytest.mark.slow
def test_henon_fold_and_period_doubling_curves():
    (pd,) = _henon_branch(3.0).bifurcations
    fold = next(b for b in _henon_branch(-2.0, max_steps=30).bifurcations if b.kind == "fold")
    for bif, closed in ((pd, lambda b: 3 * (1 - b) ** 2 / 4), (fold, lambda b: -((1 - b) ** 2) / 4)):
        c = continue_curve(henon2, bif, B0, 0.9, param_name="a", param2_name="b")
        assert c.kind == bif.kind and c.status == "parameter_end" and len(c) > 10
        assert c.q[0] == B0 and c.q[-1] == 0.9  # the whole range of b
        assert np.max(np.abs(c.p - closed(c.q))) <= 1e-9, c.kind
        assert not c.cusps


def cusp_map(x, p, q):
    return x + p + q * x - x**3


def test_cusp_map_fold_curve_and_its_cusp():
    br = continue_branch(lambda x, p: cusp_map(x, p, 1.0), np.array([0.0]), 0.0, -1.0, ds=0.05)
    fold = next(b for b in br.bifurcations if b.kind == "fold")
    c = continue_curve(cusp_map, fold, 1.0, -1.0)
    assert np.max(np.abs(27 * c.p**2 - 4 * c.q**3)) <= 1e-8
    # Through the cusp onto the other sheet (x < 0, p > 0) and back to q = 1.
    assert c.points[0, 0] > 0 > c.points[-1, 0] and c.p[-1] > 0 and c.q[-1] == 1.0
    ((pc, qc),) = c.cusps
    assert abs(pc) <= 1e-9 and abs(qc) <= 1e-6


@pytest.mark.slow
def test_neimark_sacker_curve():
    def f2(z, p, q):
        rot = jnp.array([[jnp.cos(q), -jnp.sin(q)], [jnp.sin(q), jnp.cos(q)]])
        return jnp.exp(p) * rot @ z - (z @ z) * z

    (ns,) = continue_branch(lambda z, p: f2(z, p, 0.5), np.zeros(2), -0.2, 0.2, ds=0.05).bifurcations
    c = continue_curve(f2, ns, 0.5, 2.5)
    # Through the strong resonances 1:4 (q = pi / 2) and 1:3 (q = 2 pi / 3).
    assert c.status == "parameter_end" and c.q[-1] == 2.5
    assert np.max(np.abs(c.p)) <= 1e-9 and np.max(np.abs(c.kappa - np.cos(c.q))) <= 1e-9


def test_curve_bad_input():
    (pd,) = _henon_branch(3.0).bifurcations
    with pytest.raises(UsageError, match="not located"):
        continue_curve(henon2, dataclasses.replace(pd, located=False), B0, 0.9)
    with pytest.raises(UsageError, match="q range is empty"):
        continue_curve(henon2, pd, B0, B0)
    with pytest.raises(UsageError, match="finite"):
        continue_curve(henon2, pd, B0, np.inf)
    with pytest.raises(UsageError, match="shape it is given"):
        continue_curve(lambda z, a, b: z[:1], pd, B0, 0.9)
    with pytest.raises(UsageError, match="got a branch-point"):
        continue_curve(henon2, dataclasses.replace(pd, kind="branch-point"), B0, 0.9)
    with pytest.raises(UsageError, match="not a fixed point"):
        continue_curve(henon2, pd, 0.5, 0.9)  # pd is a point of b = -0.9, not of b = 0.5


@pytest.mark.slow
def test_attention_fold_curve_in_two_parameters():
    # n = d = 2, causal, uniform attention, W_V = [[p, w], [0, 1]]: the rank-2 equilibria with
    # token 1 at (0, 1) are born in a fold at w = sqrt(2 p - p^2) (tests/test_continuation.py).
    br = continue_branch(fam_w, start_a(1.3), 1.3, 0.5, ds=0.05, max_steps=12, param_name="w")
    fold = next(b for b in br.bifurcations if b.kind == "fold")
    fam2 = lambda w, p: uniform_causal_layer(2, 2, jnp.array([[p, w], [0.0, 1.0]]))  # noqa: E731
    c = continue_curve(fam2, fold, P, 0.9, ds=0.03)
    assert c.status == "parameter_end" and c.points.shape[1:] == (2, 2) and c.q[-1] == 0.9 and len(c) > 3
    assert np.max(np.abs(c.p**2 - (2 * c.q - c.q**2))) <= 1e-8
