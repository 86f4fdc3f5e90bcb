"""A zero token under each normalisation: LayerNorm with eps, mu and the cosines, and the Lyapunov
spectrum under the sphere norm.
"""

import pytest


def test_layernorm_with_eps_maps_a_zero_row_to_its_bias_like_numpy():
    """BERT's centred LayerNorm with eps on a zero row and on a nearly-constant row, against a
    NumPy LayerNorm: the formula, not NaN and not "divide by 1"; the flag is kept."""
    import jax.numpy as jnp
    import numpy as np

    from rankdyn._model._norms import LayerNorm

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 6))
    x[1] = 0.0
    x[2] = 3.0 + 1e-16 * np.arange(6)  # a spread at rounding level: flagged degenerate
    gain, bias = rng.normal(size=6), rng.normal(size=6)

    def numpy_ln(x, eps):
        xc = x - x.mean(-1, keepdims=True)
        return gain * xc / np.sqrt((xc**2).mean(-1, keepdims=True) + eps) + bias

    for eps in (1e-12, 1e-36):  # BERT's, and one below the row's spread (the old code divided by 1)
        y, bad = LayerNorm(gain, bias, eps=eps)(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(y), numpy_ln(x, eps), rtol=1e-6, atol=1e-9)
        assert np.allclose(np.asarray(y)[1], bias) and bool(bad[1]) and bool(bad[2]) and not bool(bad[0])


@pytest.mark.slow
def test_a_zero_token_keeps_mu_and_only_its_cosines_are_nan(getkey):
    """Attention dropout on a causal window without skip zeroes a row (both neighbours
    dropped); under LayerNorm with eps it maps to the bias (here 0). mu is defined there and
    reported, the cosines are NaN (undefined), the degenerate flag is set. The old scan dropped
    every metric of such a trajectory (mu null from then on)."""
    import jax.numpy as jnp
    import numpy as np

    import rankdyn as rd

    layer = rd.make_layer(
        getkey(),
        n=6,
        d=4,
        mask="causal",
        window=1,
        placement="post",
        ln="layernorm",
        skip=False,
        attn_dropout=0.7,
    )
    x0 = jnp.asarray(np.random.default_rng(0).normal(size=(3, 6, 4)))
    traj = rd.simulate(layer, x0, 6, metrics="mu,min_cos", key=getkey(), save_states=True)
    states = np.asarray(traj.states)
    zero = np.all(states == 0, axis=-1).any(axis=(0, 2))  # a saved layer with a zero token
    assert zero.any(), "the case must produce a zero row"
    mu = np.asarray(traj.summary.mean["mu"]) if hasattr(traj.summary, "mean") else None
    assert mu is not None and np.all(np.isfinite(mu))
    assert np.all(np.isnan(np.asarray(traj.summary.mean["min_cos"])[zero]))
    assert int(traj.summary.degenerate) >= 1


def test_lyapunov_spectrum_refuses_zero_tokens_under_the_sphere_layernorm():
    """All-zero starting tokens gave finite exponents with nothing flagged: x/|x| is undefined
    there. They are refused, naming the first zero token; a nonzero start is still accepted by
    the same check (the control runs no spectrum: ``k`` 0 is refused after it)."""
    import jax
    import jax.numpy as jnp

    import rankdyn as rd
    from rankdyn._errors import UsageError
    from rankdyn.lyapunov import lyapunov_spectrum

    layer = rd.make_layer(jax.random.PRNGKey(0), n=3, d=2, mask="causal")
    x0 = jnp.ones((2, 3, 2)).at[1, 2].set(0.0)
    with pytest.raises(UsageError, match=r"1 zero token\(s\) \(first: trajectory 1, token 2\)"):
        lyapunov_spectrum(layer, x0, 4, k=2, key=jax.random.key(0))
    with pytest.raises(UsageError, match="k"):
        lyapunov_spectrum(layer, jnp.ones((2, 3, 2)), 4, k=0, key=jax.random.key(0))
