"""One parameter table: ignored options are refused alike on the CLI, in TOML and in the API, and
the equilibrium tolerances follow the dtype (issues 18 and 19).

Each row of ``CLI_ROWS``, ``TOML_ROWS`` and ``API_ROWS`` was accepted and ignored before the
table (0.2): it must now be refused with a message naming the option. The positive controls
check that the same option is accepted where it is read.
"""

import warnings

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import jit_call

import rankdyn as rd
from rankdyn._errors import UsageError
from rankdyn._model._params import PARAMS, RUN_PARAMS
from rankdyn.cli import main

# (command, argv, fragments of the one error line)
CLI_ROWS = {
    "ln with norm none": (
        "simulate",
        ["--placement", "none", "--ln", "rms"],
        ["--ln rms", "ignored", "none"],
    ),
    "w with orthogonal": ("simulate", ["--w", "3"], ["--w 3.0", "ignored", "--value orthogonal"]),
    "w 2.0 with gaussian": ("simulate", ["--value", "gaussian", "--w", "2"], ["--w 2.0", "ignored"]),
    "rank-tol without a rank metric": (
        "simulate",
        ["--rank-tol", "1e-3", "--metrics", "mu,min_cos"],
        ["--rank-tol 0.001", "ignored", "num_rank"],
    ),
    "equilibria x0": ("equilibria", ["--x0", "gaussian"], ["--x0 gaussian", "ignored"]),
    "equilibria solver flag with exact": ("equilibria", ["--starts", "10"], ["--starts", "exact"]),
    "equilibria residual-tol with exact": (
        "equilibria",
        ["--residual-tol", "1e-9"],
        ["--residual-tol", "exact"],
    ),
    "equilibria tree flag with joint": (
        "equilibria",
        ["--mask", "complete", "--tree-starts", "4"],
        ["--tree-starts", "joint-search"],
    ),
    "equilibria joint flag with tree": (
        "equilibria",
        ["--qk", "bert", "--method", "lm"],
        ["--method", "tree-search"],
    ),
    "equilibria joint-coverage without exact": (
        "equilibria",
        ["--mask", "complete", "--joint-coverage"],
        ["--joint-coverage"],
    ),
}


@pytest.fixture
def no_compute(monkeypatch):
    """Simulation and census fail the test if they are reached."""
    import rankdyn._run._simulate
    import rankdyn.equilibria

    def computed(*a, **k):
        raise AssertionError("compute was reached although an option is ignored")

    monkeypatch.setattr(rankdyn._run._simulate, "simulate", computed)
    monkeypatch.setattr(rankdyn.equilibria, "equilibrium_census", computed)


@pytest.mark.parametrize("row", list(CLI_ROWS))
def test_cli_refuses_ignored_options(row, tmp_path, capsys, no_compute):
    command, argv, fragments = CLI_ROWS[row]
    out = tmp_path / "out"
    rc = main([command, *argv, "--n", "4", "--d", "4", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(f"rankdyn {command}: error: "), err
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    assert not out.exists()


def test_cli_reads_options_where_they_apply(tmp_path):
    """Positive controls: --placement; --w where the family reads it; --rank-tol with num_rank;
    equilibria's --w 7 default only where W_V reads it."""
    from rankdyn._commands import equilibria, simulate
    from rankdyn.cli import build_parser

    out = str(tmp_path / "out")
    parse = build_parser().parse_args
    args = parse(["simulate", "--placement", "pre", "--value", "jordan", "--w", "3", "--metrics", "num_rank"])
    config = simulate.check_model_args(args)
    assert config.placement == "pre" and config.w == 3.0
    assert simulate.check_run_args(args, config)[0] == ("num_rank",)
    args = parse(["simulate", "--value", "bidiagonal", "--out", out])
    simulate.check_model_args(args)
    assert args.w == 2.0 and args.ln == "sphere" and args.x0 == "sphere"  # recorded as used
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the flag itself does not warn
        assert parse(["simulate", "--placement", "none"]).placement == "none"
    args = parse(["equilibria", "--value", "orthogonal", "--out", out])
    assert equilibria._check(args).w is None
    args = parse(["equilibria", "--out", out])
    assert equilibria._check(args).w == 7.0


TOML = """
[axes]
mask = {masks}
[fixed]
n = 4
d = 4
num_layers = 2
batch = 2
{extra}
"""

# (masks axis, extra [fixed] lines, fragments of the ValueError)
TOML_ROWS = {
    "window with causal": ('["causal", "complete"]', "window = 2", ["[fixed] window = 2", "ignored"]),
    "jordan_k with orthogonal": ('["causal"]', "jordan_k = 2", ["[fixed] jordan_k = 2", "ignored"]),
    "qk_std with bert": ('["causal"]', "qk_std = 0.5", ["[fixed] qk_std = 0.5", "ignored"]),
    "ln with placement none": (
        '["causal"]',
        'placement = "none"\nln = "rms"',
        ["[fixed] ln = 'rms'", "ignored"],
    ),
    "w with orthogonal": ('["causal"]', "w = 3.0", ["[fixed] w = 3.0", "ignored"]),
    "norm (not a key)": ('["causal"]', 'norm = "pre"', ["unknown parameter 'norm'", "placement"]),
    "jordan_k axis with orthogonal": ('["causal"]\njordan_k = [2, 3]', "", ["[axes] jordan_k is ignored"]),
}


@pytest.mark.parametrize("row", list(TOML_ROWS))
def test_toml_refuses_ignored_fixed_keys(row):
    masks, extra, fragments = TOML_ROWS[row]
    with pytest.raises(ValueError) as err:
        rd.sweep.load_sweep_config(TOML.format(masks=masks, extra=extra))
    for frag in fragments:
        assert frag in str(err.value), (frag, str(err.value))


def test_toml_reads_keys_some_cell_uses():
    """A [fixed] key read by one cell of the grid is kept; the placement's key is ``placement``,
    the name of the flag and of make_layer's argument."""
    cfg = rd.sweep.load_sweep_config(TOML.format(masks='["causal", "window"]', extra="window = 2"))
    assert cfg.fixed["window"] == 2
    a = rd.sweep.load_sweep_config(TOML.format(masks='["causal"]', extra='placement = "pre"'))
    assert a.fixed["placement"] == "pre"


API_ROWS = {
    "w with orthogonal": (dict(w=2.0), ["w=2.0", "ignored", "value='orthogonal'"]),
    "mlp_ratio without mlp": (dict(mlp_ratio=2), ["mlp_ratio=2", "ignored", "mlp=False"]),
    "ln with placement none": (dict(placement="none", ln="rms"), ["ln='rms'", "placement='none'"]),
    "qk_std with bert": (dict(qk_std=0.3), ["qk_std", "ignored"]),
    "dilation with causal": (dict(dilation=2), ["dilation=2", "mask='causal'"]),
}


@pytest.mark.parametrize("row", list(API_ROWS))
def test_api_refuses_ignored_arguments(row):
    kwargs, fragments = API_ROWS[row]
    with pytest.raises(UsageError) as err:
        rd.make_layer(jr.PRNGKey(0), n=4, d=4, **kwargs)
    for frag in fragments:
        assert frag in str(err.value), (frag, str(err.value))
    with pytest.raises(UsageError):
        rd.ModelConfig(n=4, d=4, **kwargs)


def test_table_generates_every_declaration():
    """make_layer's signature, ModelConfig's fields, the CLI flags and the sweep keys are the
    table's rows; jordan_k lives in the table and where W_V is drawn, nowhere else."""
    import dataclasses
    import inspect
    import pathlib

    from rankdyn.cli import build_parser

    api = [p.name for p in PARAMS if p.api]
    assert list(inspect.signature(rd.make_layer).parameters)[1:-1] == api
    assert [f.name for f in dataclasses.fields(rd.ModelConfig)] == [p.name for p in PARAMS]
    helps = build_parser().parse_args(["simulate"])
    assert all(hasattr(helps, p.name) for p in PARAMS if p.flag)
    assert set(rd.sweep.SWEEP_PARAMS) == {p.key for p in PARAMS + RUN_PARAMS if p.key}
    root = pathlib.Path(rd.__file__).parent
    users = sorted(str(f.relative_to(root)) for f in root.rglob("*.py") if "jordan_k" in f.read_text())
    assert len(users) <= 2, users
    dqk = jnp.asarray(rd.make_layer(jr.PRNGKey(0), n=4, d=8, heads=2, output_projection=True).dqk)
    assert float(dqk) == 4.0  # the key width d // heads, computed once (rankdyn._model._params.default_dqk)


@pytest.mark.slow
def test_float32_tolerances_follow_the_dtype():
    """Without x64 the exact census matched 1 of 7 closed forms (tolerance 1e-8) and the tree
    search (residual 1e-10) accepted no float32 token; both now scale with the dtype's eps."""
    from rankdyn._equilibria._tree import tree_search
    from rankdyn._theory._constructions import all_closed_form_equilibria
    from rankdyn.equilibria import equilibrium_census

    with jax.enable_x64(False):
        layer = rd.make_layer(jr.PRNGKey(0), n=3, d=3, value="bidiagonal", w=7.0, qk="zero")
        closed = [(k, np.asarray(x)) for k, x in all_closed_form_equilibria(3, 3, 7.0)]
        assert layer.weights.w_v.dtype == jnp.float32 and closed[0][1].dtype == np.float32
        census = equilibrium_census(layer, jr.PRNGKey(1), closed_forms=closed, progress=False)
        assert census.closed_forms["found"] == census.closed_forms["total"] == 7
        # n = 2 tokens under a causal mask with softmax attention: the first token is a real
        # eigenvector of W_V (+-e_1, two solutions), the second one solves a 1-D problem.
        small = rd.make_layer(jr.PRNGKey(0), n=2, d=2, value="bidiagonal", w=3.0)
        tree = tree_search(small, jr.PRNGKey(2), starts=16)
        assert len(tree.x) >= 2
        fx = np.stack([np.asarray(jit_call(small, jnp.asarray(x))[0]) for x in tree.x])  # one program
        assert np.max(np.abs(fx - tree.x)) < 1e-4  # genuine float32 equilibria
