"""Progress inside reproduce targets: a step per unit of real work, the ETA from measured steps."""

import sys
import types

import pytest

from rankdyn._run import _progress
from rankdyn._run._progress import StepProgress, eta_seconds, plan_steps, step_done, target_progress


def test_eta_is_the_mean_measured_step_times_the_steps_left():
    assert eta_seconds([], 5) is None  # nothing measured: no guess
    assert eta_seconds([30.0, 10.0], 3) == pytest.approx(60.0)
    assert eta_seconds([4.0], 0) == 0.0


def test_step_progress_measures_each_step_with_its_own_clock():
    now = [100.0]
    steps = StepProgress("undirected", enabled=False, clock=lambda: now[0])
    now[0] = 110.0  # set-up before the plan is not a step
    steps.plan(4)
    assert steps.eta() is None
    for dt in (60.0, 20.0):  # a slow first step (compile), then a faster one
        now[0] += dt
        steps.step("search")
    assert steps.step_seconds == [60.0, 20.0] and steps.done == 2
    # 2 steps left at the measured mean of 40 s: 80 s, not a guess from other targets.
    assert steps.eta() == pytest.approx(80.0)


def test_calls_outside_a_target_are_no_ops_and_inside_report_to_it():
    plan_steps(3)  # no active target: nothing happens, nothing raises
    step_done("x")
    with target_progress("a", enabled=False) as outer:
        plan_steps(2)
        step_done("one")
        with target_progress("b", enabled=False) as inner:
            step_done("inner")
        step_done("two")
    assert (outer.total, outer.done, inner.done) == (2, 2, 1)
    assert _progress._CURRENT.get() is None


def test_run_targets_gives_each_target_its_own_step_bar(tmp_path, monkeypatch):
    from rankdyn import _reproduce as experiments
    from rankdyn._reproduce import _registry

    seen = []

    from rankdyn._reproduce._target import Description, Rendered
    from rankdyn._reproduce._verdict import check

    def compute(sizes, seed):
        plan_steps(3)
        for i in range(3):
            step_done(f"step {i}")
        current = _progress._CURRENT.get()
        seen.append((current.desc, current.total, current.done))
        return {}

    module = types.ModuleType("fake_target")  # the registry loads modules (type-checked)
    module.NAME, module.CLAIM = "fake", "c"
    module.sizes = lambda quick: {}
    module.compute = compute
    module.checks = lambda m: [check("ran", True)]
    module.render = lambda out, m, cs, *, quick: Rendered(figures=[], notes="")
    module.describe = lambda m, cs, sz, *, seed, quick: Description(setting={})
    monkeypatch.setitem(sys.modules, "fake_target", module)
    monkeypatch.setattr(experiments, "TARGETS", {"fake": "fake_target"})
    # The runner looks a target up in the registry: one record for the fake one.
    monkeypatch.setitem(_registry._BY_NAME, "fake", _registry.Target("fake", "fake_target"))
    res = experiments.run_targets(["fake"], tmp_path, progress=False)
    assert res["failed"] == [] and seen == [("fake", 3, 3)]
