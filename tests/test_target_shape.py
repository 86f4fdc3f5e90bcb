"""Every reproduce target is one registry record and a module of sizes -> compute -> checks ->
render -> describe, composed by `run_target`; `TargetResult` assembles the result dict of the
reproduce contract (no simulation here)."""

import dataclasses
import importlib
import inspect
import json

import numpy as np
import pytest

from rankdyn._reproduce import REGISTRY, RESULT_KEYS, TARGETS, VERDICTS, render_target
from rankdyn._reproduce._registry import FAMILIES
from rankdyn._reproduce._target import Description, Measured, Rendered, TargetResult
from rankdyn._reproduce._verdict import check, untestable

#: The parts every target module defines, in the order run_target calls them.
PARTS = ("sizes", "compute", "checks", "render", "describe")


@pytest.mark.parametrize("name", list(TARGETS))
def test_target_is_sizes_compute_checks_render_describe(name):
    (spec,) = [t for t in REGISTRY if t.name == name]
    mod = importlib.import_module(TARGETS[name])
    assert mod.NAME == spec.name and spec.family in FAMILIES and spec.claim == mod.CLAIM
    for part in PARTS:
        assert callable(getattr(mod, part, None)), f"{name} lacks {part}()"
    assert not hasattr(mod, "run"), f"{name}.run(): run_target composes the parts"
    assert isinstance(spec.sizes(True), dict) and isinstance(spec.sizes(False), dict)
    ret = inspect.signature(mod.compute).return_annotation
    typ = getattr(mod, ret, None) if isinstance(ret, str) else ret
    assert isinstance(typ, type) and issubclass(typ, Measured), f"{name}.compute must return a Measured"
    # One render type and one describe type for every target.
    for part, want in (("render", Rendered), ("describe", Description)):
        ret = inspect.signature(getattr(mod, part)).return_annotation
        assert ret in (want, want.__name__), f"{name}.{part} must return {want.__name__}"
    assert "quick" in inspect.signature(mod.render).parameters
    ctx = set(inspect.signature(mod.compute).parameters) - {"sz", "seed"}
    want = ({"cache"} if spec.shares_runs else set()) | ({"ckpt"} if spec.needs_checkpoint else set())
    assert ctx == want, (name, ctx)


def test_registry_names_are_unique_and_drive_the_tables():
    names = [t.name for t in REGISTRY]
    assert len(set(names)) == len(names) and list(TARGETS) == names
    from rankdyn._reproduce import CHECKPOINT_TARGETS

    assert CHECKPOINT_TARGETS == tuple(t.name for t in REGISTRY if t.needs_checkpoint)


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


def test_one_json_serialiser(tmp_path):
    """`to_jsonable` is the one serialiser: targets' results, typed results' to_dict and write_json."""
    import jax.numpy as jnp

    from rankdyn._reproduce._target import off_json
    from rankdyn._run._io import to_jsonable, write_json

    @dataclasses.dataclass(frozen=True)
    class Hidden(Measured):
        shown: np.ndarray
        hidden: np.ndarray = off_json(default=None)

    @dataclasses.dataclass
    class Plain:
        values: np.ndarray

    class Typed:
        def to_dict(self):
            return {"x": np.float32("nan"), "hidden": Hidden(np.array([1.0, np.inf]), np.ones(2))}

    obj = {
        (1, 2): Typed(),
        "jax": jnp.array([[0.5, jnp.nan]]),
        "scalars": (np.int64(3), np.float64(-np.inf), np.bool_(True), np.float32(0.25), np.str_("s")),
        "plain": Plain(np.arange(2)),
    }
    want = {
        "(1, 2)": {"x": None, "hidden": {"shown": [1.0, None]}},
        "jax": [[0.5, None]],
        "scalars": [3, None, True, 0.25, "s"],
        "plain": {"values": [0, 1]},
    }
    got = to_jsonable(obj)
    assert got == want and to_jsonable(got) == got
    assert [type(v) for v in got["scalars"]] == [int, type(None), bool, float, str]
    text = write_json(tmp_path / "r.json", obj).read_text()
    assert json.loads(text) == want and "NaN" not in text and "Infinity" not in text
    # A target's measured is the same conversion (no second serialiser in _reproduce/).
    m = _Outer(np.float64(np.nan), {"a": _Inner(np.array([np.nan]))}, (1, 2))
    assert TargetResult("t", "c", {}, m, []).to_dict()["measured"] == to_jsonable(m) == m.to_dict()
    assert m.to_dict() == {"rate": None, "runs": {"a": {"values": [None]}}, "pair": [1, 2]}
