"""Every class of bad input is refused before any compute, with a message naming the flag/argument.

The CLI rows run `rankdyn.cli.main` in-process and check: exit code 2, one ``error:`` line naming
the flag and the fix, no traceback, the output folder never created, and no compute (the
functions that draw weights or run targets/sweeps are replaced by ones that fail the test).
"""

import math
import os
from pathlib import Path

import jax.random as jr
import numpy as np
import pytest

import rankdyn as rd
from rankdyn._model._config import SEED_MAX, ModelConfig
from rankdyn.cli import build_parser, main

SWEEP_TOML = """
[axes]
mask = ["causal", "window"]
[fixed]
n = 4
d = 4
num_layers = 2
batch = 2
"""


def _unwritable(tmp: Path) -> Path:
    """A folder path that cannot be created: under a read-only folder (or /proc for root)."""
    if os.geteuid() == 0:  # root ignores permission bits; /proc refuses new folders
        if not Path("/proc").is_dir():
            pytest.skip("no unwritable location for root on this system")
        return Path("/proc/rankdyn-bad-input")
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return ro / "out"


def _file(tmp: Path) -> Path:
    f = tmp / "a_file"
    f.write_text("not a folder")
    return f


# (command, argv (OUT: the output folder that must stay absent), fragments of the error line).
# A callable argv gets the tmp folder (for rows about paths).
ROWS = {
    # --- --out / --compile-cache that cannot be used
    "out is a file": ("simulate", lambda t: ["--out", str(_file(t))], ["--out", "is an existing file"]),
    "out under a file": ("simulate", lambda t: ["--out", str(_file(t) / "sub")], ["--out", "is a file, so"]),
    "out unwritable": ("simulate", lambda t: ["--out", str(_unwritable(t))], ["--out", "cannot write in"]),
    "equilibria out is a file": (
        "equilibria",
        lambda t: ["--out", str(_file(t))],
        ["--out", "existing file"],
    ),
    "reproduce out is a file": (
        "reproduce",
        lambda t: ["--quick", "--out", str(_file(t))],
        ["--out", "existing file"],
    ),
    "compile cache is a file": (
        "reproduce",
        lambda t: ["--out", "OUT", "--compile-cache", str(_file(t))],
        ["--compile-cache", "existing file"],
    ),
    "compile cache unwritable": (
        "reproduce",
        lambda t: ["--out", "OUT", "--compile-cache", str(_unwritable(t))],
        ["--compile-cache", "cannot write in"],
    ),
    "sweep out is a file": (
        "sweep",
        lambda t: [str(t / "s.toml"), "--out", str(_file(t))],
        ["--out", "existing file"],
    ),
    "sweep out unwritable": (
        "sweep",
        lambda t: [str(t / "s.toml"), "--out", str(_unwritable(t))],
        ["--out", "cannot write in"],
    ),
    # --- sizes that cannot fit in memory (far beyond any machine: the estimate refuses them)
    "huge n and d": (
        "simulate",
        ["--n", "65536", "--d", "65536"],
        ["--n 65536", "needs about", "Fix: lower"],
    ),
    "huge batch": (
        "simulate",
        ["--batch", str(10**10), "--per-trajectory"],
        ["needs about", "Fix:", "--batch"],
    ),
    "batch beyond 32-bit indices": ("simulate", ["--batch", str(10**10)], ["--batch 10000000000", "2^31"]),
    "huge per-layer weights": (
        "simulate",
        ["--num-layers", str(10**9), "--per-layer-weights"],
        ["weights", "Fix: drop --per-layer-weights"],
    ),
    "equilibria Jacobians": ("equilibria", ["--n", "256", "--d", "256"], ["needs about", "Fix: lower --"]),
    # --- seeds outside the PRNG's range
    "seed too large": ("simulate", ["--seed", str(SEED_MAX + 1)], ["--seed 4294967296", "seed range"]),
    "seed negative": ("simulate", ["--seed", "-1"], ["--seed -1", "seed range"]),
    "equilibria seed": ("equilibria", ["--seed", str(2**70)], ["--seed", "seed range"]),
    "reproduce seed": ("reproduce", ["--quick", "--seed", "-3", "--out", "OUT"], ["--seed -3", "seed range"]),
    # --- non-finite or negative tolerances, rates and model numbers
    "rank-tol nan": ("simulate", ["--rank-tol", "nan"], ["--rank-tol nan", "finite number > 0"]),
    "rank-tol negative": ("simulate", ["--rank-tol=-1e-6"], ["--rank-tol -1e-06", "> 0"]),
    "w nan": ("simulate", ["--value", "bidiagonal", "--w", "nan"], ["--w nan", "finite"]),
    "dqk inf": ("simulate", ["--dqk", "inf"], ["--dqk inf", "finite"]),
    "dqk zero": ("simulate", ["--dqk", "0"], ["--dqk 0.0", "must be > 0"]),
    "dropout nan": ("simulate", ["--dropout", "nan"], ["--dropout nan", "finite"]),
    "dropout 1": ("simulate", ["--dropout", "1"], ["--dropout 1.0", "[0, 1)"]),
    "attn-dropout negative": (
        "simulate",
        ["--attn-dropout", "-0.1", "--hidden-dropout", "-0.1"],
        ["--attn-dropout -0.1", "[0, 1)"],
    ),
    "dropout twice": ("simulate", ["--dropout", "0.1", "--attn-dropout", "0.1"], ["--dropout", "either"]),
    "equilibria residual-tol": ("equilibria", ["--residual-tol", "-1"], ["--residual-tol -1.0", "> 0"]),
    "equilibria learning-rate": ("equilibria", ["--learning-rate", "inf"], ["--learning-rate inf", "> 0"]),
    "equilibria dropout": ("equilibria", ["--dropout", "0.1"], ["--dropout", "no fixed points"]),
    "equilibria w nan": ("equilibria", ["--w", "nan"], ["--w nan", "finite"]),
    # --- mask (and family) parameters that do not fit
    "dilated wider than n": (
        "simulate",
        ["--mask", "dilated", "--window", "3", "--n", "8"],
        ["--window 3", "--n 8", "--window <= 1"],
    ),
    "window ignored by causal": (
        "simulate",
        ["--mask", "causal", "--window", "3"],
        ["--window 3", "--mask causal"],
    ),
    "window ignored by complete": (
        "equilibria",
        ["--mask", "complete", "--window", "2"],
        ["--window 2", "ignored"],
    ),
    "window not below n": (
        "simulate",
        ["--mask", "window", "--window", "40", "--n", "8"],
        ["--window 40 is not smaller than --n 8"],
    ),
    "jordan-k ignored": (
        "simulate",
        ["--value", "orthogonal", "--jordan-k", "2"],
        ["--jordan-k 2", "ignored"],
    ),
    "jordan-k above d": (
        "simulate",
        ["--value", "jordan", "--jordan-k", "9", "--d", "4"],
        ["--jordan-k 9", "[1, d = 4]"],
    ),
    # --- sizes and counts
    "n zero": ("simulate", ["--n", "0"], ["--n 0", "positive integer"]),
    "d zero": ("equilibria", ["--d", "0"], ["--d 0", "positive integer"]),
    "heads do not divide d": ("simulate", ["--heads", "3", "--d", "8"], ["--heads must divide --d"]),
    "batch zero": ("simulate", ["--batch", "0"], ["--batch 0", ">= 1"]),
    "layers negative": ("simulate", ["--num-layers", "-1"], ["--num-layers -1", ">= 0"]),
    "save-every not a divisor": (
        "simulate",
        ["--num-layers", "5", "--save-every", "2"],
        ["--save-every 2", "divisor"],
    ),
    "per-layer weights with 0 layers": (
        "simulate",
        ["--num-layers", "0", "--per-layer-weights"],
        ["--num-layers 0"],
    ),
    "old flag --layers": ("lyapunov", ["--layers", "4"], ["--layers is now --num-layers", "'num_layers'"]),
    "old flag --norm": ("simulate", ["--norm=pre"], ["--norm is now --placement"]),
    "old sweep key layers": (
        "sweep",
        lambda t: [str(t / "old.toml")],
        ["unknown parameter 'layers' in [fixed] ('layers' is now 'num_layers')"],
    ),
}


@pytest.fixture
def no_compute(monkeypatch):
    """Replace every entry point of compute by one that fails the test if it is reached."""
    import rankdyn._model._build
    import rankdyn._reproduce
    import rankdyn.sweep

    def computed(*a, **k):
        raise AssertionError("compute was reached although the input is bad")

    monkeypatch.setattr(rankdyn._model._build, "build_layer", computed)
    monkeypatch.setattr(rankdyn._reproduce, "run_targets", computed)
    monkeypatch.setattr(rankdyn.sweep, "run_sweep", computed)


@pytest.mark.parametrize("row", list(ROWS))
def test_cli_bad_input_refused_before_compute(row, tmp_path, capsys, no_compute):
    command, argv, fragments = ROWS[row]
    (tmp_path / "s.toml").write_text(SWEEP_TOML)
    (tmp_path / "old.toml").write_text(SWEEP_TOML.replace("num_layers = ", "layers = "))
    out = tmp_path / "out"
    argv = argv(tmp_path) if callable(argv) else argv
    argv = [str(out) if a == "OUT" else a for a in argv]
    if "--out" not in argv:
        argv = argv + ["--out", str(out)]
    rc = main([command, *argv, "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"rankdyn {command}: error: "), err
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])
    assert not out.exists()


# (callable, fragments of the ValueError): the Python API names the argument.
API_ROWS = {
    "batch -1": (lambda: rd.initial_tokens(jr.PRNGKey(0), "sphere", 3, 2, batch=-1), ["batch", "got -1"]),
    "batch 0": (lambda: rd.initial_tokens(jr.PRNGKey(0), "sphere", 3, 2, batch=0), ["batch", "got 0"]),
    "batch (2, 0)": (
        lambda: rd.initial_tokens(jr.PRNGKey(0), "sphere", 3, 2, batch=(2, 0)),
        ["batch", "(2, 0)"],
    ),
    "make_layer d=0": (lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=0), ["d=0", "token dimension"]),
    "make_layer w nan": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=3, value="bidiagonal", w=math.nan),
        ["w=nan"],
    ),
    "make_layer dqk inf": (lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=3, dqk=math.inf), ["dqk=inf"]),
    "make_layer placement": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=3, placement="side"),
        ["unknown norm placement placement='side'"],
    ),
    "make_layer norm=": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=3, norm="post"),
        ["the placement is placement=", "placement='post'"],
    ),
    "make_layer dropout": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=3, dropout=1.0),
        ["dropout=1.0", "[0, 1)"],
    ),
    "make_layer dilated": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=8, d=3, mask="dilated", window=2),
        ["window=2", "n=8", "window <= 1"],
    ),
    "make_layer window ignored": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=8, d=3, mask="causal", window=2),
        ["window=2", "mask='causal'"],
    ),
    "make_layer array mask shape": (
        lambda: rd.make_layer(jr.PRNGKey(0), n=3, d=3, mask=np.eye(4, dtype=bool)),
        ["mask has shape (4, 4)", "n=3"],
    ),
    "config seed": (lambda: ModelConfig(n=3, d=3, seed=SEED_MAX + 1), ["seed=4294967296", "seed range"]),
    "config seed type": (
        lambda: ModelConfig.from_mapping({"n": 3, "d": 3, "seed": 1.5}),
        ["seed must be an integer"],
    ),
    "config from TOML keys": (
        lambda: ModelConfig.from_mapping({"n": 4, "d": 4, "mask": "window", "window": 4}, where="[fixed]"),
        ["[fixed] window = 4 is not smaller than [fixed] n = 4"],
    ),
    "config unknown key": (
        lambda: ModelConfig.from_mapping({"n": 4, "d": 4, "windw": 1}, where="[fixed]"),
        ["unknown model parameter [fixed] windw"],
    ),
}


@pytest.mark.parametrize("row", list(API_ROWS))
def test_python_bad_input_names_the_argument(row):
    fn, fragments = API_ROWS[row]
    with pytest.raises(ValueError) as exc:
        fn()
    for frag in fragments:
        assert frag in str(exc.value), (frag, str(exc.value))


@pytest.mark.parametrize("command", ["simulate", "equilibria"])
def test_defaults_pass_every_check(command, tmp_path):
    """Positive control: the default flags are not refused (the memory estimate must not cry wolf)."""
    from rankdyn._commands import equilibria, simulate

    args = build_parser().parse_args([command, "--out", str(tmp_path / "out")])
    if command == "simulate":
        simulate.check_run_args(args, simulate.check_model_args(args))
    else:
        equilibria._check(args)
    assert not (tmp_path / "out").exists()  # the probe leaves nothing behind
    assert list(tmp_path.iterdir()) == []


def test_memory_estimate_and_refusal():
    """The generic estimate counts the arrays by hand-computable formulas; the refusal compares it
    with the available memory and says the estimate, the largest part and the fix."""
    from rankdyn._run._memory import MemoryEstimate, check_memory, equilibria_memory

    assert (
        equilibria_memory(n=2, d=3, chunk=10, itemsize=8).parts[
            "Jacobians and their SVD (per chunk of starts)"
        ]
        == 10 * 4 * 36 * 8
    )
    check_memory(MemoryEstimate({"a": 100}), fix="f", available=(100, "host RAM"))  # fits exactly
    check_memory(MemoryEstimate({"a": 10**20}), fix="f", available=(None, "unknown"))  # unknown: no refusal
    with pytest.raises(
        ValueError, match=r"needs about 200 B \(b: 150 B\), but only 100 B of host RAM .* Fix: f"
    ):
        check_memory(MemoryEstimate({"a": 50, "b": 150}), fix="f", available=(100, "host RAM"))
