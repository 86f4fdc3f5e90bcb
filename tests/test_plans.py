"""The run plans (`rankdyn._run._plan`): JAX-free, one memory estimate for every caller, and the
checks they own refuse with the flag (command line) or the argument (library) named."""

import dataclasses
import re
import subprocess
import sys

import jax.random as jr
import pytest

import rankdyn as rd
from rankdyn import UsageError
from rankdyn._run._plan import SimulatePlan


def test_plan_modules_import_no_jax():
    """The command line builds a plan, and refuses from it, before JAX loads."""
    mods = ["rankdyn._run._plan", "rankdyn._lyapunov._plan", "rankdyn._equilibria._steps"]
    code = "import sys\n" + "".join(f"import {m}\n" for m in mods) + "print('jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


@pytest.mark.parametrize(
    "kw, flag_text, arg_text",
    [
        (dict(num_layers=5, save_every=2), "--num-layers 5 is not a multiple of --save-every 2",
         "num_layers=5 is not a multiple of save_every=2"),
        (dict(rank_tol=1.0), "--rank-tol 1.0: expected a finite number > 0", "rank_tol=1.0: expected"),
        (dict(rank_tol=float("nan")), "--rank-tol nan", "rank_tol=nan"),
        (dict(chunk=0), "--chunk must be a positive number of trajectories, got 0", "chunk must be"),
        (dict(batch=0), "--batch 0: expected an integer >= 1", "batch=0: expected an integer >= 1"),
        (dict(num_layers=-1), "--num-layers -1: expected an integer >= 0", "num_layers=-1"),
        (dict(save_every=True), "--save-every True", "save_every=True"),
    ],
)  # fmt: skip
def test_plan_refuses_and_names_the_flag_or_argument(kw, flag_text, arg_text):
    base = dict(n=4, d=4, batch=2, num_layers=4)
    with pytest.raises(UsageError) as err:
        SimulatePlan(**(base | kw), flags=True)
    assert flag_text in str(err.value)
    with pytest.raises(UsageError) as err:
        SimulatePlan(**(base | kw))
    assert arg_text in str(err.value)


def test_plan_refuses_a_batch_beyond_32bit_indices():
    plan = SimulatePlan(n=4, d=4, batch=2**31, num_layers=4, flags=True)
    with pytest.raises(UsageError, match=r"--batch 2147483648 is beyond the 2\^31"):
        plan.check_indices()
    SimulatePlan(n=4, d=4, batch=2**31 - 1, num_layers=4).check_indices()


def test_cli_sweep_and_library_agree_on_the_blocked_estimate(tmp_path, monkeypatch):
    """Causal n = 4096 on the blocked path: the layer takes 512-token blocks (`choose_block_size`);
    the command line and the sweep planner estimated its memory with 128-token ones."""
    from rankdyn._commands import simulate as cli
    from rankdyn._run import _simulate
    from rankdyn._sweep._plan import sweep_memory, sweep_plan
    from rankdyn.cli import build_parser

    n, d, batch, metrics = 4096, 8, 2, "mu,eps_min"
    flags = ["simulate", "--mask", "causal", "--n", str(n), "--d", str(d), "--batch", str(batch)]
    flags += ["--chunk", str(batch), "--num-layers", "4", "--metrics", metrics, "--attention", "blocked"]
    flags += ["--x64"]  # as the tests' x64 library run: 8 bytes per number
    args = build_parser().parse_args(flags + ["--out", str(tmp_path / "o")])
    _, _, cli_plan = cli.check_run_args(args, cli.check_model_args(args))
    cli_parts = cli_plan.memory("cpu").parts

    toml = f"""name = "p"
[axes]
seed = [0]
[fixed]
mask = "causal"
n = {n}
d = {d}
num_layers = 4
batch = {batch}
attention = "blocked"
[observe]
per_layer = ["mu"]
final = ["mu"]
"""
    cfg = rd.load_sweep_config(toml)
    sweep_parts = sweep_memory(cfg, sweep_plan(cfg), itemsize=8).parts

    layer = rd.make_layer(jr.key(0), n=n, d=d, mask="causal", attention="blocked")
    assert layer.block_size == 512  # the block the layer takes, not BLOCK_SIZE = 128
    seen = {}

    class Stop(Exception):
        pass

    def capture(est, **kw):
        seen["parts"] = est.parts
        raise Stop

    monkeypatch.setattr(_simulate, "check_memory", capture)
    monkeypatch.setattr(_simulate.jax, "default_backend", lambda: "cpu")
    x0 = rd.TokenSampler(jr.key(1), "sphere", n, d, batch)
    with pytest.raises(Stop):
        rd.simulate(layer, x0, 4, metrics=metrics, chunk=batch)
    lib_parts = seen["parts"]
    assert x0.dtype.itemsize == 8

    assert cli_plan.attention_path == "blocked" and cli_plan.block == 512
    for part in ("working set of one chunk", "per-layer metrics"):
        assert cli_parts[part] == lib_parts[part], part
    # The sweep's chunk holds one cell of `batch` trajectories and records `mu` (+ eps_min), as here.
    assert sweep_parts["working set of one chunk"] == lib_parts["working set of one chunk"]
    # A 128-token block would count other numbers: the estimate reads the block.
    small = SimulatePlan.for_layer(layer, batch=batch, itemsize=4, num_layers=4, chunk=batch, metrics=("mu",))
    assert small.memory().parts != dataclasses.replace(small, block_size=128).memory().parts


def test_simulate_refuses_a_plan_of_another_run(getkey):
    layer = rd.make_layer(getkey(), n=4, d=4)
    x0 = jr.normal(getkey(), (3, 4, 4))
    plan = SimulatePlan.for_layer(layer, batch=3, itemsize=4, num_layers=6, save_every=2)
    with pytest.raises(UsageError, match="plan= describes another run \\(num_layers 6 against 4\\)"):
        rd.simulate(layer, x0, 4, save_every=2, plan=plan)


def test_lyapunov_plan_checks_once_for_the_library_and_the_command_line():
    from rankdyn._lyapunov._plan import LyapunovPlan

    cases = [
        (dict(k=9), "--k 9: expected 1 <= k <= 8", "k=9: expected 1 <= k <= 8"),
        (dict(discard=8), "--discard 8: expected 0 <= discard < --num-layers 8", "discard=8: expected"),
        (dict(qr_every="0"), "--qr-every 0: expected an integer >= 1 or auto", "qr_every='0': expected"),
        (dict(qr_every=3), "multiples of --qr-every 3", "multiples of qr_every=3"),
        (dict(chunk=0), "--chunk must be a positive number", "chunk must be a positive number"),
    ]
    for kw, flag_text, arg_text in cases:
        base = dict(num_steps=8, dim=8, what="num_layers") | kw
        with pytest.raises(UsageError, match=re.escape(flag_text)):
            LyapunovPlan(**base, flags=True)
        with pytest.raises(UsageError, match=re.escape(arg_text)):
            LyapunovPlan(**base)
    plan = LyapunovPlan(8, 40, None, 2, "2", default_k=16, what="num_layers", flags=True)
    assert (plan.exponents, plan.qr_every) == (16, 2)  # the command line's default k; "2" read as 2
    assert plan.schedule().records[-1] == 8 and plan.schedule().discard == 2
    assert LyapunovPlan(8, 40).exponents == 40  # the library's default: every exponent


def test_continuation_plan_resolves_the_steps_once():
    from rankdyn._equilibria._steps import ContinuationPlan

    plan = ContinuationPlan(1.0, 3.0)
    assert (plan.ds, plan.ds_min, plan.ds_max, plan.max_steps) == (2 / 50, 2 / 50 * 1e-6, 8 / 50, 400)
    narrow = dict(p_start=1.0, p_end=1.0000000000000002, param="w")
    with pytest.raises(
        UsageError, match=re.escape("--from 1.0 --to 1.0000000000000002: the interval is too")
    ):
        ContinuationPlan(**narrow, flags=True)
    with pytest.raises(UsageError, match=re.escape("the interval [1.0, 1.0000000000000002] is too narrow")):
        ContinuationPlan(**narrow)
    with pytest.raises(UsageError, match=re.escape("--ds nan: expected a finite number > 0")):
        ContinuationPlan(1.0, 2.0, float("nan"), flags=True)
    with pytest.raises(UsageError, match=re.escape("--max-steps 0: expected an integer >= 1")):
        ContinuationPlan(1.0, 2.0, max_steps=0, flags=True)
    with pytest.raises(UsageError, match="max_steps must be an integer >= 1, got 2.5"):
        ContinuationPlan(1.0, 2.0, max_steps=2.5)


def test_simulate_refuses_a_sampler_batch_beyond_32bit_indices(getkey):
    """Trajectory i's tokens come from ``fold_in(key, i)`` with a 32-bit i: 2^31 of them would repeat."""
    layer = rd.make_layer(getkey(), n=4, d=4)
    x0 = rd.TokenSampler(getkey(), "sphere", 4, 4, 2**31)
    with pytest.raises(UsageError, match=r"batch=2147483648 is beyond the 2\^31 trajectory indices"):
        rd.simulate(layer, x0, 2, chunk=4)
