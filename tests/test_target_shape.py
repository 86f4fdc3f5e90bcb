"""Every reproduce target is compute -> checks -> render, with a short ``run`` that composes them,
and `TargetResult` assembles the result dict of the reproduce contract (no simulation here)."""

import ast
import dataclasses
import importlib
import inspect
import json

import numpy as np
import pytest

from rankdyn.experiments import RESULT_KEYS, TARGETS, VERDICTS, render_target
from rankdyn.experiments._target import Measured, TargetResult
from rankdyn.experiments._verdict import check, untestable

#: Longest ``run`` a target may have: composing compute, checks and render takes a few lines.
RUN_MAX_LINES = 60


@pytest.mark.parametrize("name", list(TARGETS))
def test_target_is_compute_checks_render(name):
    mod = importlib.import_module(TARGETS[name])
    for part in ("compute", "checks", "render", "run"):
        assert callable(getattr(mod, part, None)), f"{name} lacks {part}()"
    ret = inspect.signature(mod.compute).return_annotation
    typ = getattr(mod, ret, None) if isinstance(ret, str) else ret
    assert isinstance(typ, type) and issubclass(typ, Measured), f"{name}.compute must return a Measured"
    tree = ast.parse(inspect.getsource(mod))
    (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"]
    assert run.end_lineno - run.lineno + 1 <= RUN_MAX_LINES, f"{name}.run() is over {RUN_MAX_LINES} lines"


@dataclasses.dataclass(frozen=True)
class _Inner(Measured):
    values: np.ndarray


@dataclasses.dataclass(frozen=True)
class _Outer(Measured):
    rate: np.float64
    runs: dict
    pair: tuple


def test_target_result_has_the_contract_keys_and_is_json():
    m = _Outer(np.float64(0.5), {"a": _Inner(np.arange(3.0))}, (1, 2))
    cs = [check("rate < 1", m.rate < 1, "0.5"), untestable("bound", "bound is 1")]
    res = TargetResult("t", "claim", {"n": np.int64(3)}, m, cs, figures=["f.png"], tables="| x |").to_dict()
    assert set(RESULT_KEYS) <= set(res) and res["verdict"] in VERDICTS
    assert res["verdict"] == "partially"  # an untestable check caps the verdict
    assert res["measured"] == {"rate": 0.5, "runs": {"a": {"values": [0.0, 1.0, 2.0]}}, "pair": [1, 2]}
    assert res["markdown"] == "| x |"  # the checks are listed once, from res["checks"]
    assert [c["status"] for c in res["checks"]] == ["pass", "not testable here"]
    json.dumps(res)
    assert render_target(res).count("| check | result | detail |") == 1
    failed = TargetResult("t", "c", {}, m, [check("x", False)]).to_dict()
    assert failed["verdict"] == "not reproduced"
    word = TargetResult("t", "c", {}, m, cs, verdict_word="inconclusive", criterion="rule").to_dict()
    assert (word["verdict"], word["criterion"]) == ("inconclusive", "rule")
