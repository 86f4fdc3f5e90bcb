"""``rankdyn lyapunov --checkpoint``: a tiny GPT-2 written by HF transformers (`checkpoint_models`).

The oracle does not use rankdyn's layers: with k = nd (all of $\\mathbb R^{nd}$) the exponents of
one trajectory sum to $\\frac1T \\sum_t \\log|\\det J_t|$, whatever the initial tangent vectors,
where $J_t$ is the Jacobian of HF's own ``GPT2Block`` ``t`` at HF's own hidden state ``t``
(torch.autograd, float64). GPT-2 is pre-LN with a residual stream, so the $J_t$ are invertible
and the space is $\\mathbb R^{nd}$ (docs/theory.md#lyapunov-spectra); a post-LN BERT block is not
(its LayerNorm removes each token's mean and scale: $\\det J_t = 0$).
"""

import hashlib
import json

import numpy as np
import pytest

pytest.importorskip("transformers")

from checkpoint_models import VOCAB, gpt2_zip, hf_hidden_states  # noqa: E402

import rankdyn.lyapunov  # noqa: E402
from rankdyn.cli import main  # noqa: E402

N, BATCH = 5, 2


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lyap_ckpt")
    zip_path, hf = gpt2_zip(folder)
    ids = np.random.default_rng(3).integers(0, VOCAB, (BATCH, N))
    np.save(folder / "ids.npy", ids)
    return {"gpt2": zip_path, "hf": hf, "ids": ids, "ids_file": folder / "ids.npy"}


def _log_dets(hf, ids) -> np.ndarray:
    """``(batch, layers)`` log|det| of each GPT2Block's Jacobian along HF's trajectory."""
    import torch

    hs = hf_hidden_states(hf, ids)  # (batch, layers + 1, n, d); the last one has ln_f applied
    out = np.zeros((ids.shape[0], len(hf.h)))
    for b in range(ids.shape[0]):
        for t, block in enumerate(hf.h):

            def f(h, block=block):
                y = block(h[None])
                return (y[0] if isinstance(y, tuple) else y)[0]

            jac = torch.autograd.functional.jacobian(f, torch.as_tensor(hs[b, t]))
            out[b, t] = np.linalg.slogdet(jac.reshape(hs.shape[-2] * hs.shape[-1], -1).numpy())[1]
    return out


@pytest.mark.slow  # end to end: the command and the HF oracle
def test_checkpoint_spectrum_sums_to_hf_log_determinants(tiny, tmp_path, capsys):
    out = tmp_path / "out"
    dim = N * 12  # R^(nd): GPT-2 is pre-LN (n_embd 12)
    argv = ["lyapunov", "--checkpoint", str(tiny["gpt2"]), "--input-ids", str(tiny["ids_file"])]
    argv += ["--k", str(dim), "--per-trajectory", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    assert f"full space (dim {dim})" in capsys.readouterr().out
    data = json.loads((out / "lyapunov.json").read_text())
    s = data["spectrum"]
    assert (s["space"], s["dim"], s["k"], s["unit"]) == ("full", dim, dim, "per layer")
    assert s["num_flagged"] == 0 and s["count"] == BATCH
    # The real architecture, not the random model's defaults (d 64, placement post, ...).
    cfg = data["config"]
    assert (cfg["arch"], cfg["d"], cfg["heads"], cfg["placement"], cfg["ln"]) == (
        "gpt2",
        12,
        3,
        "pre",
        "layernorm",
    )
    assert (cfg["n"], cfg["batch"], cfg["num_layers"], cfg["k"], cfg["trained_layers"]) == (
        N,
        BATCH,
        2,
        dim,
        2,
    )
    assert cfg["mask"] == "causal" and "value" not in cfg and "qk" not in cfg
    sha = hashlib.sha256((tiny["gpt2"].parent / "saved" / "model.safetensors").read_bytes()).hexdigest()
    assert data["checkpoint"]["sha256"] == sha and data["inputs"] == {"input_ids": str(tiny["ids_file"])}
    # The oracle: per trajectory, sum of the exponents = mean log|det J_t| of HF's blocks.
    per = np.asarray(s["per_trajectory"]["exponents"])
    want = _log_dets(tiny["hf"], tiny["ids"]).mean(axis=1)
    assert np.all(np.abs(want) > 1.0)  # far from 0: a missing term or factor would show
    np.testing.assert_allclose(per.sum(axis=1), want, rtol=1e-9)
    assert (out / "spectrum.png").stat().st_size > 0 and (out / "convergence.png").stat().st_size > 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--k", "61"], "--k 61: expected 1 <= k <= 60"),
        (["--discard", "2"], "--discard 2"),
        (["--qr-every", "x"], "--qr-every x"),
        (["--value", "orthogonal"], "--value does not apply with --checkpoint"),
        (["--n", "4"], "--n 4 disagrees with --input-ids"),
    ],
)
def test_bad_checkpoint_input_is_one_error_line_before_compute(
    tiny, tmp_path, capsys, monkeypatch, extra, message
):
    def no_compute(*a, **k):
        raise AssertionError("lyapunov_spectrum ran on a refused input")

    monkeypatch.setattr(rankdyn.lyapunov, "lyapunov_spectrum", no_compute)
    out = tmp_path / "o"
    argv = ["lyapunov", "--checkpoint", str(tiny["gpt2"]), "--input-ids", str(tiny["ids_file"])]
    assert main(argv + extra + ["--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rankdyn lyapunov: error:"), err
    assert message in err[0], err[0]
    assert not out.exists()
