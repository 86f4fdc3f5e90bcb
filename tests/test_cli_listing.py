"""Commands that answer without computing: `rankdyn continue` accepts every parameter it lists, and
`rankdyn checkpoints` lists without loading JAX.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_continue_accepts_every_param_it_lists():
    """``continue --param qk_std | value_std | ln_radius`` (parameters with no flag of their own,
    3 of the 5 choices it lists) are accepted: the flags are checked (no compute) and the model at
    --from reads the parameter."""
    from rankdyn._commands import continuation
    from rankdyn.cli import build_parser

    for name, extra in (
        ("qk_std", ["--qk", "gaussian"]),
        ("value_std", ["--value", "gaussian"]),
        ("ln_radius", []),
    ):
        argv = ["continue", "--param", name, "--from", "0.5", "--to", "1", "--n", "2", "--d", "2", *extra]
        args = build_parser().parse_args([*argv, "--out", "unused"])
        config = continuation._check(args)
        assert getattr(args, name) == 0.5 and config is not None, name


def test_checkpoints_lists_names_without_loading_jax():
    """``rankdyn checkpoints`` took 12 s to print three names: listing them imported JAX (through
    the checkpoint package's eager imports). It imports none now."""
    code = "import sys; from rankdyn.cli import main; main(['checkpoints']); "
    code += "print('jax:', 'jax' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=ROOT)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "jax: False" in res.stdout, res.stdout + res.stderr
    assert "rankdyn simulate --checkpoint NAME" in res.stdout


def test_continue_param2_accepts_every_param_and_blames_only_given_flags():
    """``--param2 qk_std | value_std | ln_radius`` was an internal error (no flag of their own), and
    ``--param w`` with any ``--param2`` was refused for ``--w 2.0``, a value the model check had
    written back (no two-parameter curve in w could be drawn)."""
    from rankdyn._commands import continuation
    from rankdyn.cli import build_parser

    base = ["continue", "--n", "2", "--d", "2", "--out", "unused"]
    for argv in (
        ["--param", "dqk", "--from", "1", "--to", "2", "--qk", "gaussian", "--param2", "qk_std"],
        ["--param", "w", "--from", "3", "--to", "2", "--qk", "gaussian", "--param2", "qk_std"],
        ["--param", "w", "--from", "3", "--to", "2", "--qk", "bert", "--param2", "dqk"],
        ["--param", "dqk", "--from", "1", "--to", "2", "--qk", "bert", "--param2", "w"],
        [
            "--param",
            "dqk",
            "--from",
            "1",
            "--to",
            "2",
            "--qk",
            "bert",
            "--value",
            "gaussian",
            "--param2",
            "value_std",
        ],
        ["--param", "w", "--from", "3", "--to", "2", "--ln", "sphere", "--param2", "ln_radius"],
    ):
        args = build_parser().parse_args([*base, *argv, "--from2", "0.5", "--to2", "1"])
        assert continuation._check(args) is not None, argv


def test_census_of_a_layer_without_equilibria_is_empty():
    """A causal layer whose W_V has no real eigenvalue has no equilibrium (the first token is an
    eigenvector): the census says so (it raised ``max() arg is an empty sequence``)."""
    import jax.numpy as jnp
    import jax.random as jr

    import rankdyn as rd

    layer = rd.make_layer(jr.PRNGKey(0), n=2, d=2, mask="causal", value="orthogonal", qk="zero")
    rotation = jnp.array([[0.6, 0.8], [-0.8, 0.6]], dtype=layer.weights.w_v.dtype)  # eigenvalues 0.6 +- 0.8i
    layer = eqx_set_w_v(layer, rotation.reshape(layer.weights.w_v.shape))
    census = rd.equilibrium_census(layer, jr.PRNGKey(1))
    assert len(census.equilibria) == 0


def eqx_set_w_v(layer, w_v):
    import equinox as eqx

    return eqx.tree_at(lambda m: m.weights.w_v, layer, w_v)
