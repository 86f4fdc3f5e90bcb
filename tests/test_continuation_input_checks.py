"""`rankdyn continue` and `continue_branch`: refusals that name their own cause and come before JAX
loads; intervals too narrow or too wide for float64 steps; a ``--seed`` that nothing reads.
"""

import inspect

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import refusals_in_one_process

from rankdyn._errors import UsageError
from rankdyn.cli import main
from rankdyn.equilibria import continue_branch

BASE = ["continue", "--param", "w", "--from", "3", "--to", "0.5"]


def test_every_continue_refusal_answers_before_jax_and_names_its_own_cause(tmp_path):
    """The flag checks and the ``--start`` file are read before JAX loads (a bad file came after 32
    compiles); an error of another flag is not prefixed with "--to 0.5 for --param w"; a folder
    is called a folder; an interval float64 cannot step through is refused before the census."""
    folder = tmp_path / "starts.npy"  # a folder whose name looks like the file expected
    folder.mkdir()
    np.save(tmp_path / "wrong.npy", np.zeros((3, 3)))
    out = ["--out", str(tmp_path / "out")]
    cases = {
        f"--start {folder} is a folder": [*BASE, "--start", str(folder), *out],
        "expected equilibria of shape (n, d) = (6, 6)": [*BASE, "--start", str(tmp_path / "wrong.npy"), *out],
        "error: --window 3 is ignored by --mask causal": [*BASE, "--window", "3", *out],
        "error: --n 0: the number of tokens": [*BASE, "--n", "0", *out],
        "--to -1.0 for --param dqk: --dqk -1.0": ["continue", "--param", "dqk", "--qk", "bert", "--from", "1",
                                                  "--to", "-1", *out],
        "the interval is too narrow for float64 steps": ["continue", "--param", "w", "--from", "1", "--to",
                                                         "1.0000000000000002", *out],
        "no fixed points": [*BASE, "--dropout", "0.1", *out],
        "n * d = 4096 is above 2048": [*BASE, "--n", "64", "--d", "64", *out],
        "--stability-tol 5.0: expected a number in [0, 1)": [*BASE, "--stability-tol", "5", *out],
        "--param w with --d 1: a 1 x 1 W_V has no off-diagonal entry": [*BASE, "--d", "1", *out],
        "--param w with --d 1: a 1 x 1 W_V": ["basins", "--param", "w", "--from", "1", "--to", "2", "--steps",
                                              "3", "--d", "1", *out],
        "--stability-tol nan: expected a number in [0, 1)": ["equilibria", "--stability-tol", "nan", *out],
    }  # fmt: skip
    errors, jax = refusals_in_one_process(cases)
    assert "for --param w" not in errors[2] and "for --param w" not in errors[3]
    assert not jax, "a refusal of rankdyn continue imported JAX"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # builds and compiles layers (about 4-11 s under load)
def test_seed_is_refused_where_nothing_reads_it(tmp_path, capsys):
    """The default model (bidiagonal W_V, --qk zero, exact census) draws nothing, so --seed is
    refused there rather than recorded in branches.json; a model with random weights reads it."""
    from rankdyn._commands import continuation
    from rankdyn.cli import build_parser

    argv = ["continue", "--param", "w", "--from", "3", "--to", "2.5", "--n", "2", "--d", "2"]
    assert main([*argv, "--seed", "5", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--seed is ignored here" in err and "census is exact" in err, err
    assert not (tmp_path / "a").exists()
    # Positive control: with random attention weights the seed changes the layer, and is accepted.
    args = build_parser().parse_args([*argv, "--qk", "bert", "--seed", "5", "--out", str(tmp_path / "b")])
    config = continuation._check(args)
    continuation._check_seed_read(config, "w", 3.0, census=True)
    assert args.seed_given and args.seed == 5


def _halve(x, p):
    """x -> x / 2 + 1e-300 p: the fixed point x = 2e-300 p, of order 1 along the whole interval."""
    return x / 2 + 1e-300 * p


def test_an_interval_too_narrow_for_float64_is_refused():
    # A step of 1e-6 ds could not change p: the secant was zero and the parameter NaN.
    with pytest.raises(UsageError, match=r"the interval \[1.0, 1.0000000000000002\] is too narrow"):
        continue_branch(_halve, np.array([0.0]), 1.0, 1.0 + 2.2e-16)


def test_a_huge_interval_sums_its_arclength_without_overflow():
    """Steps of 2e298 in p: their square overflowed (an OverflowError from the arclength sum, an
    internal error of ``rankdyn continue --to 1e300``). The branch is followed to its end."""
    br = continue_branch(_halve, jnp.array([0.0]), 0.0, 1e300, max_steps=200)
    assert br.status == "parameter_end" and br.params[-1] >= 1e300, (br.status, br.params[-3:])
    assert np.all(np.isfinite(br.arclength)) and np.all(np.diff(br.arclength) > 0)


@pytest.mark.slow  # builds the layer from two keys
def test_equilibria_seed_is_refused_where_nothing_reads_it(tmp_path, capsys):
    """`rankdyn equilibria --seed 3` on the default model (exact census, no random weights) was
    accepted and written into equilibria.json; with random attention weights it is read."""
    from rankdyn._commands import equilibria
    from rankdyn._commands._seed_use import refuse_unread_seed
    from rankdyn._commands.simulate import layer_from_args
    from rankdyn.cli import build_parser

    assert main(["equilibria", "--seed", "3", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--seed is ignored here" in err and "census is exact" in err, err
    assert not (tmp_path / "a").exists()
    args = build_parser().parse_args(
        ["equilibria", "--qk", "bert", "--seed", "3", "--out", str(tmp_path / "b")]
    )
    config = equilibria._check(args)
    refuse_unread_seed(lambda key: layer_from_args(args, key, config), random_starts=False)  # no error
    assert args.seed_given and args.seed == 3


def test_continue_branch_arguments_are_checked_before_any_step():
    """Counts are integers (never truncated: ``max_steps=2.5`` ran 2 steps, ``"10"`` was a
    TypeError), tolerances finite and in range (``stability_tol`` is a band on |lambda| - 1 in
    (0, 1)), ``t`` only where a layer stack has layers, and the period bounded."""
    start = np.array([0.0])
    for kwargs, words in (
        ({"max_steps": 2.5}, "max_steps must be an integer"),
        ({"max_steps": "10"}, "max_steps must be an integer"),
        ({"num_multipliers": -1}, "num_multipliers must be an integer >= 1"),
        ({"stability_tol": float("nan")}, "stability_tol must be finite"),
        ({"stability_tol": 2.0}, r"stability_tol must be finite, in \[0, 1\)"),
        ({"stability_tol": -1.0}, "stability_tol must be finite"),
        ({"residual_tol": -1.0}, "residual_tol must be finite"),
        ({"residual_tol": float("nan")}, "residual_tol must be finite"),
        ({"max_turn": float("nan")}, "max_turn must be finite"),
        ({"t": 5}, "a map f.x, p. has none"),
        ({"period": 10**6}, "period must be at most 64"),
    ):
        with pytest.raises(UsageError, match=words):  # as a user calls it (no annotation hook)
            inspect.unwrap(continue_branch)(_halve, start, 0.0, 1.0, **kwargs)


def test_a_family_that_returns_no_layer_is_refused():
    with pytest.raises(UsageError, match="returned NoneType, not a SelfAttentionLayer"):
        inspect.unwrap(continue_branch)(lambda p: None, np.zeros((2, 2)), 0.0, 1.0)


def test_a_map_that_returns_nan_ends_nonfinite_and_an_escape_names_its_norm():
    """A map that turns NaN past p = 0.5 ends ``nonfinite`` (it ended ``newton_failed``); a branch
    that runs off to infinity keeps ``max_steps_reached`` and its message gives the largest norm."""

    def nan_past_half(x, p):
        return jnp.where(p > 0.5, jnp.nan, x / 2 + p)

    br = continue_branch(nan_past_half, np.array([0.0]), 0.0, 1.0, throw=False)
    assert br.status == "nonfinite", br.status

    def escape(x, p):  # fixed point x = p / (1 - 0.5): grows linearly, so the steps run out first
        return 0.5 * x + p

    with pytest.raises(Exception, match=r"largest state norm reached was [0-9.e+]+"):
        continue_branch(escape, np.array([0.0]), 0.0, 1e6, max_steps=3, ds=0.1, ds_max=0.1)


def test_census_stability_band_is_checked():
    """``equilibrium_census(stability_tol=...)`` of 2 called every multiplier marginal; NaN and -1
    are refused too, before the census runs."""
    import jax.random as jr

    import rankdyn as rd

    layer = rd.make_layer(jr.PRNGKey(0), n=2, d=2, mask="causal", value="bidiagonal", w=2.0, qk="zero")
    for bad in (2.0, float("nan"), -1.0):
        with pytest.raises(UsageError, match=r"stability_tol must be finite, in \[0, 1\)"):
            rd.equilibrium_census(layer, jr.PRNGKey(1), stability_tol=bad)


@pytest.mark.slow  # a census or a basin scan and their compiles
def test_continue_stops_between_steps_after_a_signal(tmp_path, capsys, monkeypatch):
    """A SIGTERM that arrives during a corrector step (set as the handler sets it) stops `rankdyn
    continue` before the next step: exit 143, one line, no branches.json (it ignored SIGTERM)."""
    import signal

    from rankdyn._equilibria import _continuation
    from rankdyn._run import _interrupt

    real, calls = _continuation.correct, []

    def correct_then_signal(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the first is the start's polish; the second is the first step
            _interrupt._state["signum"] = signal.SIGTERM
        return real(*args, **kwargs)

    monkeypatch.setattr(_continuation, "correct", correct_then_signal)
    try:
        code = main([*BASE, "--n", "2", "--d", "2", "--no-progress", "--out", str(tmp_path / "o")])
    finally:
        _interrupt._state["signum"] = None
    err = capsys.readouterr().err
    assert code == 143 and len(calls) == 2, (code, len(calls), err[-500:])
    assert "rankdyn continue: interrupted" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "branches.json").exists()
