"""``rankdyn simulate --checkpoint``: outputs against HF transformers, and every bad input refused.

Bad inputs run `rankdyn.cli.main` in-process: exit 2, one ``error:`` line naming the flag and the
fix, no traceback, no output folder, and no compute (`simulate` is replaced by a failing stub).
"""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

from checkpoint_models import VOCAB, WORDS, bert, edit_config, gpt2_zip, hf_hidden_states  # noqa: E402

import rankdyn._run._simulate  # noqa: E402
from rankdyn.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ckpt_cli")
    (folder / "bert").mkdir()
    hf = bert(folder / "bert")
    zip_path, _ = gpt2_zip(folder)
    text = folder / "text.txt"
    text.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(60)))
    return {"bert": folder / "bert", "hf_bert": hf, "gpt2": zip_path, "text": text}


@pytest.mark.slow  # end to end: `rankdyn simulate --checkpoint --text`
def test_text_run_writes_ids_metrics_and_provenance(tiny, tmp_path, capsys, monkeypatch):
    from rankdyn._plotting import _reproduce_sim

    kept, save = {}, _reproduce_sim.save_figure
    monkeypatch.setattr(_reproduce_sim, "save_figure", lambda fig, path: kept.setdefault(Path(path).name, fig)
                        and save(fig, path))  # fmt: skip
    out = tmp_path / "out"
    argv = [
        "simulate",
        "--checkpoint",
        str(tiny["bert"]),
        "--text",
        str(tiny["text"]),
        "--n",
        "9",
        "--batch",
        "4",
    ]
    assert main(argv + ["--metrics", "mu,mu_rel", "--no-progress", "--out", str(out)]) == 0
    assert "layer" in capsys.readouterr().out
    ids = np.load(out / "input_ids.npy")
    assert ids.dtype == np.int32 and ids.shape == (4, 9) and np.all(ids[:, 0] == 1)
    res = json.loads((out / "metrics.json").read_text())
    sha = hashlib.sha256((tiny["bert"] / "model.safetensors").read_bytes()).hexdigest()
    assert res["provenance"]["weights_sha256"] == sha == res["checkpoint"]["sha256"]
    assert (
        res["config"]["num_layers"] == 2
        and res["config"]["mask"] == "complete"
        and res["config"]["variant"] == "full"
    )
    assert res["layers"] == [0, 1, 2] and (out / "mu.png").is_file()
    # mu.png: mu beside the scale-free mu/||X||_F, titled with the model and the text.
    fig = kept["mu.png"]
    assert [ax.get_ylabel().split(",")[0] for ax in fig.axes] == ["mu (eq. 4)", "mu / ||X||_F"]
    assert np.allclose(fig.axes[1].get_lines()[0].get_ydata(), res["metrics"]["mu_rel"]["mean"])
    title = fig.get_suptitle()
    assert tiny["text"].name in title and "4 excerpts of 9 tokens" in title and "bert" in title, title
    # mu per layer (batch mean) from HF's own forward pass (float64: conftest turns x64 on).
    hs = hf_hidden_states(tiny["hf_bert"], ids)
    mu = np.linalg.norm(hs - hs.mean(axis=2, keepdims=True), axis=(2, 3)).mean(axis=0)
    np.testing.assert_allclose(res["metrics"]["mu"]["mean"], mu, rtol=1e-10)


@pytest.mark.slow
def test_input_ids_set_batch_and_n_and_depth_cycles(tiny, tmp_path):
    ids = np.random.default_rng(0).integers(0, VOCAB, (3, 7))
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "out"
    argv = [
        "simulate",
        "--checkpoint",
        str(tiny["gpt2"]),
        "--input-ids",
        str(tmp_path / "ids.npy"),
        "--num-layers",
        "5",
    ]
    argv += [
        "--variant",
        "san-skip-ln",
        "--mask",
        "window",
        "--metrics",
        "mu",
        "--no-progress",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert np.array_equal(np.load(out / "input_ids.npy"), ids)
    res = json.loads((out / "metrics.json").read_text())
    assert res["layers"] == list(range(6)) and res["flags"]["batch"] == 3
    assert (res["config"]["mask"], res["config"]["n"], res["checkpoint"]["arch"]) == ("window", 7, "gpt2")


def _copy(tiny, tmp, **config):
    folder = tmp / "copy"
    shutil.copytree(tiny["bert"], folder)
    if config:
        edit_config(folder, **config)
    return folder


def _truncated(tiny, tmp):
    folder = _copy(tiny, tmp)
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    return folder


def _no_weights(tiny, tmp):
    folder = _copy(tiny, tmp)
    (folder / "model.safetensors").unlink()
    return folder


def _npy(tmp, array):
    np.save(tmp / "ids.npy", np.asarray(array))
    return str(tmp / "ids.npy")


def _latin1(tmp):  # was decoded with replacement characters and run
    (tmp / "latin1.txt").write_bytes("caf\u00e9 w1 w2".encode("latin-1"))
    return str(tmp / "latin1.txt")


def _short(tmp):
    (tmp / "short.txt").write_text("w1 w2 w3")
    return str(tmp / "short.txt")


CK = lambda path: ["--checkpoint", str(path)]  # noqa: E731
# name -> (argv from (tiny, tmp), fragments of the error line)
ROWS = {
    "missing": (lambda k, t: CK(t / "nope") + ["--text", str(k["text"])], ["--checkpoint", "does not exist"]),
    "not a zip": (lambda k, t: CK(k["text"]) + ["--text", str(k["text"])], ["not a readable folder or zip"]),
    "no weights": (
        lambda k, t: CK(_no_weights(k, t)) + ["--text", str(k["text"])],
        ["has no model.safetensors"],
    ),
    "corrupt": (
        lambda k, t: CK(_truncated(k, t)) + ["--text", str(k["text"])],
        ["not a valid safetensors", "truncated"],
    ),
    "arch": (
        lambda k, t: CK(_copy(k, t, model_type="t5")) + ["--text", str(k["text"])],
        ["model_type 't5' is not supported", "bert, gpt2, llama, mpnet"],
    ),
    "shapes": (
        lambda k, t: CK(_copy(k, t, intermediate_size=30)) + ["--text", str(k["text"])],
        ["has shape (24, 16)", "implies (30, 16)", "do not match"],
    ),
    "n too big": (
        lambda k, t: CK(k["bert"]) + ["--text", str(k["text"]), "--n", "25"],
        ["--n 25", "24 positions"],
    ),
    "text short": (
        lambda k, t: CK(k["bert"]) + ["--text", _short(t), "--n", "9", "--batch", "1"],
        ["has 3 tokens"],
    ),
    "text not utf8": (
        lambda k, t: CK(k["bert"]) + ["--text", _latin1(t), "--n", "4", "--batch", "1"],
        ["--text", "latin1.txt: not UTF-8 text (byte 3"],
    ),
    "dilated too wide": (  # the random path's mask checks, on this path too
        lambda k, t: (
            CK(k["bert"])
            + ["--text", str(k["text"]), "--n", "8", "--batch", "1", "--mask", "dilated", "--window", "5"]
        ),
        ["--window 5 dilated hops", "--window <= 1"],
    ),
    "rank-tol unread": (
        lambda k, t: (
            CK(k["bert"])
            + ["--text", str(k["text"]), "--n", "8", "--batch", "1", "--metrics", "mu", "--rank-tol", "1e-3"]
        ),
        ["--rank-tol 0.001 is ignored"],
    ),
    "ids vocab": (
        lambda k, t: CK(k["bert"]) + ["--input-ids", _npy(t, [[1, VOCAB]])],
        ["--input-ids", "outside the vocabulary [0, 40)"],
    ),
    "ids rank": (lambda k, t: CK(k["bert"]) + ["--input-ids", _npy(t, [1, 2, 3])], ["--input-ids", "rank 2"]),
    "ids vs n": (
        lambda k, t: CK(k["bert"]) + ["--input-ids", _npy(t, [[1, 2, 3]]), "--n", "4"],
        ["--n 4 disagrees", "drop --n"],
    ),
    "model flag": (
        lambda k, t: CK(k["bert"]) + ["--text", str(k["text"]), "--value", "gaussian"],
        ["--value does not apply with --checkpoint", "drop --value"],
    ),
    "model switch": (
        lambda k, t: CK(k["bert"]) + ["--text", str(k["text"]), "--mlp"],
        ["--mlp does not apply"],
    ),
    "no input": (lambda k, t: CK(k["bert"]), ["exactly one of --text", "--input-ids"]),
    "two inputs": (
        lambda k, t: CK(k["bert"]) + ["--text", str(k["text"]), "--input-ids", _npy(t, [[1]])],
        ["exactly one of --text"],
    ),
    "window ignored": (
        lambda k, t: CK(k["bert"]) + ["--text", str(k["text"]), "--window", "2"],
        ["--window 2 is ignored by the mask 'complete'"],
    ),
    "text alone": (lambda k, t: ["--text", str(k["text"])], ["--text needs --checkpoint"]),
}


@pytest.mark.parametrize("row", list(ROWS))
def test_bad_checkpoint_input_is_refused(tiny, tmp_path, capsys, monkeypatch, row):
    def no_compute(*a, **k):
        raise AssertionError("simulate ran")

    monkeypatch.setattr(rankdyn._run._simulate, "simulate", no_compute)
    make, fragments = ROWS[row]
    out = tmp_path / "out"
    assert main(["simulate", *make(tiny, tmp_path), "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rankdyn simulate: error: "), err
    for fragment in fragments:
        assert fragment in err[0], (fragment, err[0])
    assert not out.exists()
