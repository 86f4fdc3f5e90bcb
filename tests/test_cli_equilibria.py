"""``rankdyn equilibria`` end to end at n = d = 3: method choice, JSON schema, bad input."""

import json

import numpy as np
import pytest

import rankdyn as rd
from rankdyn.cli import main


def np_map(x, w):
    """The paper's map (eq. 3, causal, uniform attention, W = I + w S), written independently."""
    d = x.shape[-1]
    y = np.cumsum(x, axis=-2) @ (np.eye(d) + w * np.eye(d, k=1))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


@pytest.mark.slow  # end to end: `rankdyn equilibria`
def test_cli_equilibria_exact(tmp_path, capsys):
    out = tmp_path / "eq"
    rc = main(["equilibria", "--n", "3", "--d", "3", "--w", "4", "--out", str(out), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "method: exact" in text and "completeness: exact (20 equilibria = 10 classes modulo sign)" in text
    data = json.loads((out / "equilibria.json").read_text())
    assert data["method"] == "exact" and data["completeness"]["kind"] == "exact"
    eqs = data["equilibria"]
    assert len(eqs) == 10 and data["by_rank"] == {"1": 1, "2": 5, "3": 4}
    for e in eqs:
        x = np.asarray(e["tokens"])
        assert np.abs(np_map(x, 4.0) - x).max() < 1e-13 and e["error_estimate"] < 1e-10
        assert int(rd.equilibria.equilibrium_rank(x)) == e["rank"]
        assert e["count"] == 2 and e["classification"] in ("stable", "marginal", "unstable")
    # Table and footer count closed forms the same way (modulo sign): k=1 is one class.
    assert data["closed_forms"]["by_rank"]["1"] == {"total": 1, "found": 1}
    assert "k=1:1/1" in text and data["closed_forms"]["found"] == data["closed_forms"]["total"] == 7


@pytest.mark.slow  # ~40 s: compiled joint-search batches plus polishing
def test_cli_equilibria_joint_search_schema(tmp_path):
    out = tmp_path / "eq"
    rc = main(
        [
            "equilibria",
            "--n",
            "3",
            "--d",
            "3",
            "--w",
            "4",
            "--search",
            "joint-search",
            "--starts",
            "64",
            "--chunk",
            "64",
            "--deflation-rounds",
            "1",
            "--deflation-starts",
            "32",
            "--max-steps",
            "60",
            "--seed",
            "1",
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert rc == 0
    data = json.loads((out / "equilibria.json").read_text())
    assert data["method"] == "joint-search" and data["completeness"]["kind"] == "saturation"
    assert len(data["completeness"]["new_classes_per_round"]) == 2
    assert sum(data["status_counts"].values()) == 64 + 32
    exact = rd.exact_equilibria(3, 3, 4.0).x
    for e in data["equilibria"]:
        x = np.asarray(e["tokens"])
        assert np.abs(np_map(x, 4.0) - x).max() < 1e-12
        # Each class is one of the exact ones (modulo sign), to 1e-10 after token polishing.
        dist = np.minimum(np.abs(exact - x).max(axis=(1, 2)), np.abs(exact + x).max(axis=(1, 2)))
        assert dist.min() < 1e-10
    assert sum(data["by_rank"].values()) == len(data["equilibria"])


@pytest.mark.parametrize(
    "flag", ["--dedup-tol", "--rank-tol", "--residual-tol", "--stability-tol", "--learning-rate"]
)
def test_cli_equilibria_rejects_bad_tolerances(tmp_path, capsys, flag):
    for bad in ("nan", "inf", "-1"):
        rc = main(["equilibria", flag, bad, "--out", str(tmp_path / "eq")])
        err = capsys.readouterr().err
        assert rc == 2 and f"error: {flag}" in err and "Traceback" not in err


def test_cli_equilibria_rejects_bad_out(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["equilibria", "--out", str(f)]) == 2
    assert "error: --out" in capsys.readouterr().err
    assert main(["equilibria", "--out", str(f / "sub")]) == 2
    assert "error: --out" in capsys.readouterr().err
    # --search exact on a system without the structure is refused before compute.
    assert main(["equilibria", "--mask", "complete", "--search", "exact", "--out", str(tmp_path / "e")]) == 2
    assert "error: --search exact" in capsys.readouterr().err
