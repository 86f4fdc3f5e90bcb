"""`solve_flow` and `rankdyn flow`: arguments that would be ignored, clamped or crash, saves that
cannot fit, and a large inverse temperature.
"""

import pytest

from rankdyn.cli import main


def test_solve_flow_refuses_what_it_ignored_clamped_or_crashed_on():
    """NaN / inf in ``times`` (NaN everywhere), float16 and complex ``x0``, ``t1`` or ``saves``
    next to ``times`` (ignored), ``chunk <= 0`` (clamped), ``max_steps <= 0``, an observer that does
    not have the signature (t, x, beta) -> dict, and a call under ``jax.jit``: each one UsageError,
    before any compile."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import rankdyn as rd
    from rankdyn._errors import UsageError
    from rankdyn.flow import FlowField, solve_flow

    field = FlowField(np.ones((3, 3), bool), 2)
    x0 = jnp.asarray(np.random.default_rng(0).normal(size=(3, 2)))
    t = np.array([0.0, 1.0, 2.0])
    cases = [
        (dict(times=np.array([0.0, np.nan, 2.0])), "times must be finite"),
        (dict(times=np.array([0.0, 1.0, np.inf])), "times must be finite"),
        (dict(x0=x0.astype(jnp.float16), t1=1.0), "float32 or float64"),
        (dict(x0=x0.astype(jnp.complex64), t1=1.0), "x0 must be real"),
        (dict(times=t, t1=5.0), "either times= or t1"),
        (dict(times=t, saves=7), "either times= or t1"),
        (dict(t1=1.0, chunk=0), "chunk must be an integer >= 1"),
        (dict(t1=1.0, max_steps=0), "max_steps must be an integer >= 1"),
    ]
    for kwargs, words in cases:
        kwargs = {"x0": x0, **kwargs}
        with pytest.raises(UsageError, match=words):
            solve_flow(field, kwargs.pop("x0"), kwargs.pop("t1", None), beta=1.0, **kwargs)
    # The observer signature is (t, x, beta), as simulate's (t, x, args): a one-argument
    # function, or one that does not return a dict, is refused before any compute.
    with pytest.raises(UsageError, match=r"observe failed .* observe\(t, x, args\) with t the time"):
        solve_flow(field, x0, 1.0, beta=1.0, observe=lambda x: {"mu": rd.mu(x)})
    with pytest.raises(UsageError, match="observe must return a dict"):
        solve_flow(field, x0, 1.0, beta=1.0, observe=lambda t, x, beta: x)
    with pytest.raises(UsageError, match="cannot run under jax.jit"):
        jax.jit(lambda x: solve_flow(field, x, 1.0, beta=1.0).summary)(x0)


def test_energy_does_not_overflow_and_large_beta_names_x64(tmp_path, capsys):
    """float32 at beta 90: the energy is finite and equals float64's (no e^beta factor that
    overflows); a beta whose energy cannot be represented is refused naming --x64, before
    compute."""
    import jax
    import numpy as np

    from rankdyn.flow import interaction_energy

    x = np.random.default_rng(1).normal(size=(6, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    # One compiled program (eager, each of its ops compiled its own).
    e32 = float(jax.jit(interaction_energy)(x.astype(np.float32), 90.0))
    g = x @ x.T
    oracle = np.exp(90.0 * g).sum() / (2 * 90.0 * 36)  # NumPy float64, the formula itself
    assert np.isfinite(e32) and abs(e32 / oracle - 1) < 1e-4
    assert main(["flow", "--beta", "200", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--beta 200" in err and "--x64" in err


def test_flow_refuses_saves_that_cannot_fit_before_compute(tmp_path, capsys):
    """``flow --saves 10000000``: refused naming the bytes, before any token is drawn."""
    from rankdyn.cli import main

    code = main(["flow", "--saves", "10000000", "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--saves 10000000 needs about" in err and "TiB" in err, err


def test_flow_scheme_flags_are_refused_before_jax(tmp_path):
    """Every ``--placement`` / ``--ngpt-alpha`` / ``--mix-time`` refusal comes before JAX loads (they
    came after it), and a ``--mix-time`` at or past ``--time`` is refused: the switch from post- to
    pre-LN would never happen (it was accepted and ran post-LN throughout)."""
    from helpers import refusals_in_one_process

    base = ["flow", "--n", "4", "--d", "3", "--batch", "2", "--out", str(tmp_path / "o")]
    ngpt, mix = [*base, "--placement", "ngpt"], [*base, "--placement", "mix"]
    cases = {
        "--placement 'ngpt' needs --ngpt-alpha": ngpt,
        "--ngpt-alpha applies to --placement 'ngpt' only": [*base, "--ngpt-alpha", "2"],
        "--mix-time applies to --placement 'mix' only": [*base, "--mix-time", "1"],
        "--placement 'mix' needs --mix-time": mix,
        "--ngpt-alpha must be a finite number > 0, got 0.0": [*ngpt, "--ngpt-alpha", "0"],
        "--ngpt-alpha must be a finite number > 0, got nan": [*ngpt, "--ngpt-alpha", "nan"],
        "--mix-time must be a finite number >= 0, got -1.0": [*mix, "--mix-time", "-1"],
        "--mix-time 150 is not before --time 100": [*mix, "--mix-time", "150", "--time", "100"],
        "--solver euler steps over the switch": [*mix, "--mix-time", "5", "--solver", "euler", "--dt", "0.1"],
    }
    _, jax = refusals_in_one_process(cases)
    assert not jax, "a refusal of rankdyn flow's scheme flags imported JAX"
    assert not (tmp_path / "o").exists()
