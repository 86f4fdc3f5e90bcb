"""`rankdyn continue` and `continue_branch`: refusals that name their own cause and come before JAX
loads; intervals too narrow or too wide for float64 steps; a ``--seed`` that nothing reads.
"""

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
    with pytest.raises(UsageError, match="too narrow to continue over"):
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
