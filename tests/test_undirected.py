"""The ``undirected`` target (open question of App. F.4): verdict words, certificates, a quick run."""

import json
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from helpers import REPRODUCE_OUT, quick_result

from rankdyn._reproduce import OPEN_QUESTION_VERDICTS, TARGETS, VERDICTS, run_targets
from rankdyn._reproduce.theory import undirected as und
from rankdyn._theory import _certificates as C


def test_verdict_words():
    """Synthetic inputs: the open-question words; a failed positive control makes it inconclusive."""
    assert und.verdict(False, [])[0] == "inconclusive"
    # A found case stands whatever the control did (the project's OPEN_QUESTION_RULE).
    v, f = und.verdict(False, ["window mask, uniform attention"])
    assert v == "counterexample found" and "positive control failed" in f
    v, f = und.verdict(True, [])
    assert v == "no evidence against" and f.startswith("no evidence against the conjecture")
    v, f = und.verdict(True, ["N = d = 3, complete mask, generic attention"])
    assert v == "counterexample found" and "complete mask, generic" in f
    assert {und.verdict(a, b)[0] for a in (True, False) for b in ([], ["x"])} <= set(OPEN_QUESTION_VERDICTS)
    assert "undirected" in TARGETS


def _np_map(x, w):
    """Independent NumPy post-LN map (eq. 3, sphere LN) from a certificate's float64 weights."""
    mask = np.asarray(w["mask"], bool)
    qk = np.asarray(w["w_q"]) @ np.asarray(w["w_k"]).T / np.sqrt(w["dqk"])
    s = np.where(mask, x @ qk @ x.T, -np.inf)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    z = a @ x @ np.asarray(w["w_v"])
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def _stable_window_point():
    """A stable equilibrium of a window +-1 layer, found by plain NumPy iteration (rank one: the
    certificate code does not depend on the rank; the quick run certifies what it finds)."""
    rng = np.random.default_rng(0)
    d = 3
    w = {
        "mask": (np.abs(np.subtract.outer(np.arange(3), np.arange(3))) <= 1).tolist(),
        "w_q": rng.uniform(-0.5, 0.5, (d, d)).tolist(),
        "w_k": rng.uniform(-0.5, 0.5, (d, d)).tolist(),
        "w_v": (np.eye(d) + 0.3 * rng.normal(size=(d, d))).tolist(),
        "dqk": 3.0,
    }
    x = rng.normal(size=(3, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for _ in range(3000):
        x = _np_map(x, w)
    return x, w


def _check_certificate(cert, tokens):
    """Re-run the existence proof from the stored strings, and check the float64 rounding."""
    w = C.weights_from_hex(cert["weights"])
    # Exact float64 weights: the hex strings round-trip bit for bit.
    assert all(float.fromhex(h) == v for h, v in zip(np.ravel(cert["weights"]["w_v"]), np.ravel(w["w_v"])))
    assert all(len(v.replace("-", "").replace(".", "")) >= 40 for row in cert["point"] for v in row)
    kz = C.krawczyk(cert["point"], w, cert["radius"], dps=cert["dps"])
    assert kz["proven"] and cert["proven"]
    # NumPy: the float64 tokens are the rounding of the 40-digit point (to 1e-14) and an
    # equilibrium of the independent NumPy map.
    pt = np.array([[float(Fraction(v)) for v in row] for row in cert["point"]])
    t = np.asarray(tokens)
    assert np.max(np.abs(pt - t)) < 1e-14
    assert np.max(np.abs(_np_map(pt, w) - pt)) < 1e-14
    assert mpmath.mpf(cert["residual"]) < mpmath.mpf("1e-40")
    # Stability by intervals, re-run from the strings: the bound holds for the NumPy map's
    # central-difference spectral radius (the radial directions add zeros only).
    bound = mpmath.mpf(C.stability_bound(cert["point"], w, cert["radius"], dps=cert["dps"])["bound"])
    assert str(bound) == str(mpmath.mpf(cert["spectral_radius_bound"]))
    assert cert["stability_proven"] == (bound < 1) and bound >= _rho_fd(pt, w) - 1e-6


def _rho_fd(pt, w):
    """Spectral radius of DF by central differences of the NumPy map (radial directions: zeros)."""
    m = pt.size
    jac = np.zeros((m, m))
    for k in range(m):
        e = np.zeros(m)
        e[k] = 1e-6
        jac[:, k] = (
            _np_map(pt + e.reshape(pt.shape), w) - _np_map(pt - e.reshape(pt.shape), w)
        ).ravel() / 2e-6
    return float(np.max(np.abs(np.linalg.eigvals(jac))))


def test_certificate_rechecks_and_can_fail():
    x, w = _stable_window_point()
    cert = C.certify(x.tolist(), w)
    assert cert["proven"] and float(cert["spectral_radius"]) < 1 and cert["stability_proven"]
    _check_certificate(cert, x)
    # The 50-digit multipliers agree with central differences of the NumPy map on the tangent space.
    pt = np.array([[float(v) for v in row] for row in cert["point"]])
    assert abs(_rho_fd(pt, w) - float(cert["spectral_radius"])) < 1e-6
    # The interval bound covers the whole box: a wider box gives a larger (still valid) bound, and
    # a map whose equilibrium is unstable (W_V scaled the other way round) is not proven stable.
    wide = mpmath.mpf(C.stability_bound(cert["point"], w, "1e-3")["bound"])
    assert wide > mpmath.mpf(cert["spectral_radius_bound"]) >= mpmath.mpf(cert["spectral_radius"])
    # A box that does not contain the equilibrium is not proven (the test can fail).
    off = [[mpmath.nstr(mpmath.mpf(v) + mpmath.mpf("1e-20"), 45) for v in row] for row in cert["point"]]
    assert not C.krawczyk(off, w, "1e-30")["proven"]
    # Nor is the right centre under the wrong weights.
    w_bad = dict(w, w_v=(np.asarray(w["w_v"]) * (1 + 1e-12 * np.eye(3))).tolist())
    assert not C.krawczyk(cert["point"], w_bad, "1e-30")["proven"]


@pytest.mark.slow
def test_undirected_quick(tmp_path):
    """The quick run: the main job's in out/reproduce/ when this source made it, else a fresh one."""
    out = REPRODUCE_OUT if quick_result("undirected") is not None else tmp_path
    if out == tmp_path:
        res = run_targets(["undirected"], tmp_path, quick=True, seed=0, progress=False)
        assert res["failed"] == []
    r = json.loads((out / "undirected.json").read_text())
    assert r["verdict"] in OPEN_QUESTION_VERDICTS and r["verdict"] in VERDICTS
    png = out / "undirected.png"
    assert r["figures"] == ["undirected.png"] and png.stat().st_size > 10_000
    m = r["measured"]
    assert {f"N=3/{k}/{a}" for k, a in und.QUICK_PAIRS} <= set(m)
    # Oracle: uniform attention over the complete mask averages every token to the same vector
    # in one layer, so nothing of rank >= 2 can survive, and no attractor has rank >= 2.
    cu = m["N=3/complete/uniform"]["main_sigma_2"]
    assert cu["mean_phi_T"] < 1e-12 and max(cu["frac_rank_ge2"]) == 0
    assert cu["attractors"]["rank_ge2"] == []
    # Positive control: the paper's W_V and the search keep rank 2 under the causal mask.
    assert min(m["N=3/causal/uniform"]["paper_W_V"]["frac_rank_ge2"]) > 0.01
    assert min(m["N=3/causal/uniform"]["main_sigma_2"]["frac_rank_ge2"]) >= und.SUSTAINED_FRACTION
    # Every check is counted in the summary table; the verdict follows from the recorded flags.
    row = next(x for x in (out / "report.md").read_text().splitlines() if x.startswith("| [undirected]"))
    assert r["checks"] and row.split("|")[3].strip() != "-"
    assert (r["verdict"], m["finding"]) == und.verdict(True, m["undirected_settings_with_higher_rank"])
    # The finding the quick run exists for: stable rank-2 equilibria under undirected masks (the
    # complete mask with symmetric logits among them), existence and stability proven by intervals
    # in this run, from the stored certificates (the chaotic search need not find them again).
    stored = m["stored_certificates"]
    assert {c["setting"] for c in stored} >= {"N=3/complete/symmetric", "N=3/window/symmetric"}
    assert all(c["existence_proven"] and c["stability_proven"] and c["undirected"] for c in stored)
    assert r["verdict"] == "counterexample found"
    # Every stored certificate re-checks from the JSON alone.
    for tag, entry in m.items():
        if not (isinstance(entry, dict) and tag.startswith("N=")):
            continue
        for key, s in entry.items():
            for e in s.get("attractors", {}).get("rank_ge2", []) if isinstance(s, dict) else []:
                if "certificate" in e:
                    _check_certificate(e["certificate"], e["tokens"])
                    b = e["certificate"]["basin"]
                    assert 0 < b["hits"] <= b["trials"] and b["wilson95"][0] <= b["hits"] / b["trials"]


def test_depth_table_verdict_follows_the_mechanism():
    """The rebuttal's numbers matched only under dropout: 'partially' with the zero-row sentence;
    matched in every mode: 'reproduced' and no such sentence. Every mode's checks count (no mode is
    chosen after the run): eval failing caps the verdict even when the mechanism check is left out."""
    from rankdyn._reproduce.sim import depth_table as T

    def stats(ratios):  # geometric mu from 1 to ratio at T (live tokens not collapsed)
        mu = {k: [float(r ** (i / 4)) for i in range(5)] for k, r in ratios.items()}
        return {
            k: T.MaskStats(v, [0.1] * 5, [0.0] * 5, [0.0] * 5, 0.0, 0.5, 0.5, v[-1], v[-1], 0)
            for k, v in mu.items()
        }

    rebuttal = stats({"complete": 1e-3, "window": 0.3, "causal": 0.9, "window-uni": 1.1})
    collapsed = {**rebuttal, "causal": stats({"causal": 1e-4})["causal"]}
    checks = {"eval": T.pattern_checks(collapsed, "eval"), "attn-dropout": T.pattern_checks(rebuttal, "attn")}
    verdicts = {"eval": "partially", "attn-dropout": "reproduced"}
    v, target, sentence = T.mechanism_verdict(verdicts, checks, 1.07e-7)
    assert v == "partially" and len(target) == 9 and "zero rows" in sentence and "1.1e-07" in sentence
    assert not all(c.passed for c in target[:-1])  # eval's failed causal check is among them
    checks["eval"] = T.pattern_checks(rebuttal, "eval")
    v, _, sentence = T.mechanism_verdict({**verdicts, "eval": "reproduced"}, checks, 0.5)
    assert v == "reproduced" and sentence == ""


def _synthetic(control=True, paper=0.04, cu=1e-17, proven=True, rho="0.92", bound="0.92"):
    """A synthetic `UndirectedMeasured`: every check passes with the defaults."""
    cert = {"proven": proven, "spectral_radius": rho, "spectral_radius_bound": bound}
    cert["stability_proven"] = proven and float(bound) < 1
    summ = {"mean_phi_T": cu}
    cells = {
        "N=3/causal/uniform": {"paper_W_V": {"frac_rank_ge2": [paper, paper]}},
        "N=3/complete/uniform": {"main_sigma_2": summ},
    }
    return und.UndirectedMeasured(
        cells=cells,
        runs=(),
        controls={"N=3 main sigma_2": control},
        found=("N = d = 3, complete mask, symmetric attention (main sigma_2 search)",),
        certificates=(cert,),
        points=(),
        scope="scope",
        eval_factor=5,
        basin_trials=1024,
        basin_depth=1000,
        census_ns=(),
        num_layers=200,
    )


def test_checks_fail_on_synthetic_results():
    """`checks` is a pure function of the measured numbers: each bad number fails its check."""
    assert all(c.passed for c in und.checks(_synthetic()))
    for bad, failing in (
        (dict(control=False), {0}),
        (dict(paper=0.005), {1}),
        (dict(cu=1e-9), {2}),
        (dict(proven=False), {3, 4}),  # no existence proof: no stability proof either
        (dict(bound="1.01"), {4}),
    ):
        cs = und.checks(_synthetic(**bad))
        assert {i for i, c in enumerate(cs) if not c.passed} == failing, bad
    m = _synthetic()
    assert m.symmetric_found == list(m.found) and m.to_dict()["certificates_stability_proven"] == 1


def test_stored_certificates_fail_when_tampered():
    """A stored point moved by 1e-20, or the weights of another map, no longer re-prove."""
    from rankdyn._reproduce.theory import _undirected_known as K

    (c,) = [c for c in K.load(3) if c["setting"] == "N=3/window/generic"]
    assert K.stored_check(K.recheck([c])).passed
    moved = dict(
        c, point=[[mpmath.nstr(mpmath.mpf(v) + mpmath.mpf("1e-20"), 45) for v in r] for r in c["point"]]
    )
    other = dict(c, weights=dict(c["weights"], w_v=c["weights"]["w_q"]))
    bad = K.recheck([moved, other])
    assert [b["existence_proven"] for b in bad] == [False, False] and not K.stored_check(bad).passed
