"""`rankdyn simulate`: the flag contract, metrics.json schema, errors without tracebacks."""

import json

import jax
import numpy as np
import pytest

import rankdyn as rd
from rankdyn.cli import COMMANDS, build_parser, main

METRICS = [
    "mu",
    "mu_rel",
    "mu_normalized",
    "row_norm_mean",
    "min_cos",
    "mean_abs_cos",
    "sigma_min",
    "stable_rank",
    "num_rank",
    "eff_rank",
    "eps_min",
]


@pytest.mark.slow  # end to end: `rankdyn simulate` with every metric and a plot
def test_simulate_writes_metrics_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(
        [
            "simulate",
            "--mask",
            "window",
            "--window",
            "1",
            "--n",
            "6",
            "--d",
            "6",
            "--dqk",
            "2",
            "--num-layers",
            "8",
            "--batch",
            "5",
            "--placement",
            "post",
            "--ln",
            "sphere",
            "--value",
            "orthogonal",
            "--qk",
            "bert",
            "--x0",
            "sphere",
            "--per-layer-weights",
            "--seed",
            "3",
            "--x64",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    data = json.loads((out / "metrics.json").read_text())
    assert (out / "mu.png").stat().st_size > 1000
    assert data["config"]["mask"] == "window" and data["config"]["seed"] == 3 and data["config"]["x64"]
    assert data["graph"] == {
        **data["graph"],
        "strongly_connected": True,
        "quasi_strongly_connected": True,
        "radius": 3,
        "diameter": 5,
        "centers": list(range(6)),
    }
    assert data["layers"] == list(range(9))
    for name in METRICS:
        assert len(data["metrics"][name]["mean"]) == 9 and len(data["metrics"][name]["std"]) == 9
    assert data["flags"] == {"nonfinite": 0, "degenerate_ln": 0, "underflow": 0, "batch": 5}
    assert set(data["timing"]) >= {"compile_s", "run_s"}
    # Post-LN: the mean token norm is exactly 1 at every layer after the first.
    np.testing.assert_allclose(data["metrics"]["row_norm_mean"]["mean"][1:], 1.0, atol=1e-12)
    # The printed table names the graph and the metrics.
    assert "radius=3" in capsys.readouterr().out


@pytest.mark.slow
def test_degenerate_ln_is_counted_not_nan():
    """Opposite tokens under uniform causal attention and identity W_V: token 2's update is
    (x1 + x2) / 2 = 0, a zero row for LN. Exactly those trajectories are counted as degenerate
    (the count `rankdyn simulate` writes as ``flags.degenerate_ln``), and nothing becomes NaN."""
    layer = rd.make_layer(jax.random.PRNGKey(0), n=2, d=2, mask="causal", qk="zero", value="identity")
    u = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]])
    rng = np.random.default_rng(0)
    fine = rng.standard_normal((3, 2, 2))
    opposite = np.stack([np.stack([v, -v]) for v in u])  # (3, 2, 2): x2 = -x1
    x0 = jax.numpy.asarray(np.concatenate([fine, opposite]))
    traj = rd.simulate(layer, x0, 3, per_trajectory=True)
    np.testing.assert_array_equal(np.asarray(traj.degenerate), [False] * 3 + [True] * 3)
    assert int(traj.summary.degenerate) == 3 and int(traj.summary.nonfinite) == 0
    assert np.all(np.isfinite(np.asarray(traj.metrics["mu"])))


# Bad flag values (--dqk 0, a window wider than n, --jordan-k > d, heads not dividing d, ...) are
# rows of the table in tests/test_bad_input.py.


def test_unknown_flag_value_is_rejected(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--mask", "diagonal"])
    assert exc.value.code == 2
    assert "invalid choice: 'diagonal'" in capsys.readouterr().err


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_defaults(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: " in text
    if command in ("simulate", "equilibria"):
        assert "--mask {" in text and "attention mask graph (default: causal)" in text
        assert "(default: False)" not in text  # switches are off by default; no noise
    if command == "simulate":
        assert "depth T (default: 128)" in text and "number of trajectories (default: 256)" in text
    if command == "reproduce":
        assert "output folder (default: out/reproduce)" in text


def test_dropout_flags_become_the_configuration():
    """--dropout sets both rates; --attn-dropout/--hidden-dropout one each; messages name the flag."""
    from rankdyn._commands._checks import model_config

    def cfg(*argv):
        return model_config(build_parser().parse_args(["simulate", *argv]))

    assert (cfg().attn_dropout, cfg().hidden_dropout, cfg().has_dropout) == (0.0, 0.0, False)
    both = cfg("--dropout", "0.25")
    assert (both.attn_dropout, both.hidden_dropout, both.has_dropout) == (0.25, 0.25, True)
    assert both.dropout_kwargs() == {"attn_dropout": 0.25, "hidden_dropout": 0.25}
    split = cfg("--attn-dropout", "0.25", "--hidden-dropout", "0.25")
    assert (split.attn_dropout, split.hidden_dropout) == (0.25, 0.25)
    with pytest.raises(ValueError, match=r"--hidden-dropout 1.5: a dropout rate must be in \[0, 1\)"):
        cfg("--hidden-dropout", "1.5")


def test_cli_and_python_build_the_same_layer(getkey):
    """The flags and make_layer's arguments become one configuration: the same layer, weight for weight."""
    import jax.random as jr

    from rankdyn._commands.simulate import layer_from_args

    argv = [
        "simulate",
        "--mask",
        "global",
        "--window",
        "2",
        "--n",
        "7",
        "--d",
        "6",
        "--heads",
        "2",
        "--value",
        "jordan",
        "--jordan-k",
        "3",
        "--w",
        "1.5",
        "--qk",
        "gaussian",
        "--per-layer-weights",
        "--num-layers",
        "3",
        "--skip",
        "--placement",
        "pre",
        "--dqk",
        "2.5",
    ]
    key = jr.PRNGKey(7)
    a = layer_from_args(build_parser().parse_args(argv), key)
    b = rd.make_layer(
        key,
        n=7,
        d=6,
        mask="global",
        window=2,
        heads=2,
        output_projection=True,
        value="jordan",
        jordan_k=3,
        w=1.5,
        qk="gaussian",
        num_layers=3,
        skip=True,
        placement="pre",
        dqk=2.5,
    )
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))
    assert (a.placement, a.skip, a.num_layers, a.num_heads) == ("pre", True, 3, 2)
    # The mask is the global-local one of width 2 (token 0 global), checked against its definition.
    i, j = np.indices((7, 7))
    want = (np.abs(i - j) <= 2) | (i == 0) | (j == 0)
    np.testing.assert_array_equal(np.asarray(a.mask), want)
