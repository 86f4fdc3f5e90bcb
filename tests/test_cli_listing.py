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
