"""Faults, round 3 (issue 33): the newer surfaces held to the standard of the simulate path.

One test (or a few) per class of the audit: interrupts (SIGINT / SIGTERM at several delays), an
empty ``--out``, data loss (atomic writes, the result manifest, reused folders), silently wrong
inputs (certificates, safetensors headers, zips, text, dtypes, solve_flow arguments, a large
beta), silently ignored flags, tracebacks, refusals naming the wrong cause, and a zero row under
a LayerNorm with eps. Most stop before any compile.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from rankdyn.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- Interrupts -------------------------------------------------------------------------------


@pytest.mark.slow
def test_sigint_and_sigterm_at_several_delays(tmp_path):
    """SIGINT right after start, SIGINT later, SIGTERM later: exit 130 / 130 / 143, one line
    saying what was saved, no traceback, no swallowed ``KeyboardInterrupt`` in a GC callback, no
    result. The old handler raised wherever the signal landed: it was swallowed there and the run
    finished with exit 0. Three processes run at once (one import each, under load)."""
    start = (
        "import sys; from rankdyn.cli import main; print('ready', flush=True); sys.exit(main(sys.argv[1:]))"
    )
    cases = [(0.0, signal.SIGINT, 130), (1.0, signal.SIGINT, 130), (2.5, signal.SIGTERM, 143)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = []
    for i, case in enumerate(cases):
        args = ["simulate", "--n", "32", "--d", "32", "--layers", "64", "--batch", "64"]
        cmd = [sys.executable, "-c", start, *args, "--out", str(tmp_path / f"o{i}")]
        procs.append(
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        )
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    for p, (delay, sig, _) in zip(procs, cases):
        time.sleep(max(0.0, t0 + delay - time.monotonic()))
        p.send_signal(sig)
    for i, (p, (delay, sig, code)) in enumerate(zip(procs, cases)):
        _, err = p.communicate(timeout=300)
        assert p.returncode == code, (delay, p.returncode, err[-2000:])
        assert "Traceback" not in err and "Exception ignored" not in err, err[-2000:]
        assert err.count("rankdyn simulate: interrupted;") == 1, err[-2000:]
        assert not (tmp_path / f"o{i}" / "metrics.json").exists()


def test_empty_out_is_refused(tmp_path, monkeypatch, capsys):
    """``--out ""`` wrote into the current folder with exit 0; it is a usage error now."""
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--n", "3", "--d", "3", "--layers", "2", "--batch", "2", "--out", ""]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--out is empty" in err
    assert list(tmp_path.iterdir()) == []


# --- Data loss --------------------------------------------------------------------------------

FLOW = ["flow", "--n", "4", "--d", "3", "--batch", "2", "--time", "1", "--saves", "3", "--no-progress"]
SIM = ["simulate", "--n", "3", "--d", "3", "--layers", "2", "--batch", "2", "--no-progress", "--plot", "mu"]


@pytest.mark.slow
def test_flow_states_are_written_atomically(tmp_path, monkeypatch, capsys):
    """A full disk halfway through ``states.npy``: the old code wrote it in place and left a
    truncated file; now the temp file is removed, the error names the file, no states.npy."""
    import errno

    import numpy as np

    real_save = np.save

    def full_disk(file, arr, *a, **k):
        target = open(file, "wb") if isinstance(file, (str, os.PathLike)) else file
        target.write(b"\x93NUMPY half")  # a few bytes land, then the disk is full
        target.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "save", full_disk)
    out = tmp_path / "o"
    rc = main([*FLOW, "--save-states", "--out", str(out)])
    monkeypatch.setattr(np, "save", real_save)
    err = capsys.readouterr().err
    assert rc == 2 and "states.npy" in err and "No space left" in err, err
    assert not (out / "states.npy").exists()
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []


@pytest.mark.slow
def test_reused_out_is_cleared_of_the_previous_result(tmp_path, capsys):
    """A second run into the same folder without --per-trajectory and one figure fewer: the
    previous run's ``per_trajectory.npz`` and ``min_cos.png`` (listed by its manifest) go; a
    file rankdyn did not write stays; the manifest lists exactly the new result with its
    hashes. The old code kept the stale files."""
    import hashlib
    import json

    out = tmp_path / "o"
    assert main([*SIM, "--per-trajectory", "--plot", "mu,min_cos", "--out", str(out)]) == 0
    assert (out / "per_trajectory.npz").is_file() and (out / "min_cos.png").is_file()
    (out / "notes.txt").write_text("mine")
    assert main([*SIM, "--out", str(out)]) == 0
    capsys.readouterr()
    assert not (out / "per_trajectory.npz").exists() and not (out / "min_cos.png").exists()
    assert (out / "mu.png").is_file() and (out / "notes.txt").read_text() == "mine"
    files = json.loads((out / "rankdyn-result.json").read_text())["files"]
    assert "metrics.json" in files and "notes.txt" not in files and "per_trajectory.npz" not in files
    for name, digest in files.items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest


def _fake_run(folder, metrics, manifest=None):
    import json

    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if manifest is not None:
        (folder / "rankdyn-result.json").write_text(json.dumps({"command": "simulate", "files": manifest}))


GOOD = {
    "config": {"mask": "causal"},
    "layers": [0, 1],
    "metrics": {"mu": {"mean": [1.0, 0.5], "std": [0, 0]}},
}


def test_plot_trusts_only_the_result_manifest(tmp_path, capsys):
    """``metrics.json`` that does not match the folder's manifest (a run interrupted while it
    replaced the result) is refused, naming the folder; the old reader plotted it."""
    _fake_run(tmp_path / "a", GOOD, manifest={"metrics.json": "0" * 64})
    rc = main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and "does not match rankdyn-result.json" in err
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize(
    "metrics, words",
    [
        ([1, 2], "no per-layer metrics"),  # not a dict: was an AttributeError traceback
        ({**GOOD, "metrics": {"mu": 3.0}}, "no per-layer mean"),  # a scalar metric
        ({**GOOD, "metrics": {"mu": {"std": [0, 0]}}}, "no per-layer mean"),  # no "mean"
    ],
)
def test_plot_refuses_odd_result_files(tmp_path, capsys, metrics, words):
    _fake_run(tmp_path / "a", metrics)
    rc = main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "f.png")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1 and words in err and "Traceback" not in err, err


def test_plot_out_folder_or_under_a_file_is_refused(tmp_path, capsys):
    _fake_run(tmp_path / "a", GOOD)
    (tmp_path / "dir.png").mkdir()
    (tmp_path / "file").write_text("x")
    for out, words in [(tmp_path / "dir.png", "is a folder"), (tmp_path / "file" / "f.png", "is a file")]:
        assert main(["plot", str(tmp_path / "a"), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("error:") == 1 and words in err and "Traceback" not in err, err


def test_plot_says_when_log_axis_drops_values(tmp_path, capsys):
    _fake_run(tmp_path / "a", {**GOOD, "metrics": {"mu": {"mean": [1.0, 0.0], "std": [0, 0]}}})
    assert main(["plot", str(tmp_path / "a"), "--out", str(tmp_path / "f.png")]) == 0
    assert "1 non-positive value(s) of mu are not drawn on the log axis" in capsys.readouterr().err


def test_reproduce_report_covers_every_result_in_the_folder(tmp_path):
    """``reproduce T --out DIR`` over an earlier run: the report lists the earlier target's
    result too (and says it is from an earlier run), and names an unreadable leftover. The old
    writer reported T alone next to the other targets' files."""
    import json

    from rankdyn._reproduce._report import write_report

    def result(name, verdict):
        return {"name": name, "claim": "c", "verdict": verdict, "checks": [], "runtime_s": 1.0, "figures": []}

    (tmp_path / "temperature.json").write_text(json.dumps(result("temperature", "reproduced")))
    (tmp_path / "ablation.json").write_text("{broken")
    text = write_report(
        tmp_path, {"masks-collapse": result("masks-collapse", "partially")}, runtime_s=1.0, quick=True, seed=0
    ).read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| [")]
    assert [r.split("]")[0][3:] for r in rows] == ["masks-collapse", "temperature"]
    assert "from an earlier run" in text and "unreadable, not reported: ablation.json" in text


# --- Silently wrong ---------------------------------------------------------------------------


class _FakeResources:
    """Stands in for ``importlib.resources`` so that `load` reads a given certificates text."""

    def __init__(self, text):
        self.text = text

    def files(self, package):
        return self

    def joinpath(self, name):
        return self

    def read_text(self, *a, **k):
        return self.text

    def __str__(self):
        return "undirected_certificates.json"


def _certificate_variants():
    import copy
    import json
    from importlib import resources

    from rankdyn._reproduce.theory import _undirected_known as K

    shipped = json.loads(
        resources.files(K.__package__).joinpath("data/undirected_certificates.json").read_text()
    )
    empty = {**shipped, "certificates": []}
    relabelled = copy.deepcopy(shipped)
    relabelled["certificates"][0]["setting"] = "N=3/window/generic"  # its W_Q = W_K: symmetric
    remasked = copy.deepcopy(shipped)
    remasked["certificates"][0]["setting"] = "N=3/complete/symmetric"  # its mask is a window
    duplicated = {**shipped, "certificates": shipped["certificates"] + shipped["certificates"][:1]}
    return K, [
        (empty, "no certificates"),
        (relabelled, "labelled attention 'generic'"),
        (remasked, "labelled mask 'complete'"),
        (duplicated, "duplicates certificate 0"),
        ("{not json", "not valid JSON"),
    ]


def test_certificates_file_is_validated(monkeypatch):
    """An empty list (the old code: verdict "no evidence against", exit 0), a relabelled
    attention or mask (a finding under the wrong setting), a duplicate (counted twice) and broken
    JSON are each refused, naming the entry; the shipped file loads."""
    import json

    K, variants = _certificate_variants()
    assert len(K.load()) >= 1
    for data, words in variants:
        text = data if isinstance(data, str) else json.dumps(data)
        monkeypatch.setattr(K, "resources", _FakeResources(text))
        with pytest.raises(ValueError, match=words):
            K.load()


def _safetensors_bytes(header_text: str, body: bytes) -> bytes:
    import struct

    raw = header_text.encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _safetensors_variants():
    """A valid file (two float32 tensors of 2 elements) and the header faults of the audit."""
    body = bytes(16)
    a = '"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}'
    b = '"b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}'
    return _safetensors_bytes("{" + a + ", " + b + "}", body), [
        ("overlap", "{" + a + ', "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}', body),
        ("duplicated name", "{" + a + ", " + a.replace("[0, 8]", "[8, 16]") + "}", body),
        ("float offsets", "{" + a.replace("[0, 8]", "[0.0, 8.0]") + ", " + b + "}", body),
        ("float shape", "{" + a.replace("[2]", "[2.0]") + ", " + b + "}", body),
        ("trailing bytes", "{" + a + ", " + b + "}", body + bytes(8)),
        ("gap", "{" + a + ", " + b.replace("[8, 16]", "[12, 20]") + "}", bytes(20)),
    ]


def test_safetensors_header_is_validated_like_the_reference_library():
    """Each header fault is refused by the ``safetensors`` package itself (the oracle) and, now,
    by rankdyn, naming the file; the valid file is read the same by both. The old reader
    accepted all six."""
    import numpy as np
    from safetensors.numpy import load as reference_load

    from rankdyn._errors import UsageError
    from rankdyn._trained._read import parse_safetensors

    good, variants = _safetensors_variants()
    ours, ref = parse_safetensors(good, "w.safetensors"), reference_load(good)
    assert set(ours) == set(ref) and all(np.array_equal(ours[k], ref[k]) for k in ref)
    for what, header, body in variants:
        data = _safetensors_bytes(header, body)
        with pytest.raises(Exception):  # the reference refuses it ...
            reference_load(data)
        with pytest.raises(UsageError, match="w.safetensors: not a valid safetensors file"):  # ... so do we
            parse_safetensors(data, "w.safetensors")


def _checkpoint_files(folder, tokenizer=None):
    """A minimal folder read_checkpoint accepts: a config and one valid safetensors tensor."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (folder / "model.safetensors").write_bytes(_safetensors_variants()[0])
    if tokenizer is not None:
        (folder / "tokenizer.json").write_bytes(tokenizer)
    return folder


def test_ambiguous_corrupt_and_oversized_zips_are_refused(tmp_path):
    """Two checkpoints in one zip (the old reader mixed one's config with the other's
    weights), an unknown compression method and a member over the cap: each one error naming
    the zip; the refusal of the two-checkpoint zip lists what it holds. A sentence-transformers
    layout (a second config.json in 1_Pooling/) is not ambiguous."""
    import zipfile

    from rankdyn._errors import UsageError
    from rankdyn._trained import _zip_members
    from rankdyn._trained._read import read_checkpoint

    a, b = _checkpoint_files(tmp_path / "a"), _checkpoint_files(tmp_path / "b")
    two = tmp_path / "two.zip"
    with zipfile.ZipFile(two, "w") as z:
        for folder in (a, b):
            for f in folder.iterdir():
                z.write(f, f"{folder.name}/{f.name}")
    with pytest.raises(
        UsageError, match=r"more than one checkpoint .*a/model.safetensors, b/model.safetensors"
    ):
        read_checkpoint(two)
    pooled = tmp_path / "pooled.zip"
    with zipfile.ZipFile(pooled, "w") as z:
        for f in a.iterdir():
            z.write(f, f.name)
        z.writestr("1_Pooling/config.json", '{"pooling_mode_mean_tokens": true}')
    assert read_checkpoint(pooled).config == {"model_type": "bert"}
    odd = tmp_path / "odd.zip"
    with zipfile.ZipFile(odd, "w") as z:
        for f in a.iterdir():
            z.write(f, f.name)
    raw = bytearray(odd.read_bytes())
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):  # set the method of every entry to 99 (unknown)
        at = raw.find(sig)
        while at >= 0:
            off = at + (8 if sig == b"PK\x03\x04" else 10)
            raw[off : off + 2] = (99).to_bytes(2, "little")
            at = raw.find(sig, at + 4)
    odd.write_bytes(bytes(raw))
    with pytest.raises(UsageError, match="odd.zip"):
        read_checkpoint(odd)
    with pytest.raises(UsageError, match="over the"):
        _zip_members.zip_members(pooled, ("config.json", "model.safetensors"), "fix", max_bytes=8)
    assert _zip_members.MAX_MEMBER_BYTES >= 440 * 10**6  # admits MPNet-base's model.safetensors


def test_broken_tokenizer_and_non_utf8_files_are_refused(tmp_path):
    """A ``tokenizer.json`` that is not UTF-8 (the old reader decoded it with replacement
    characters) or that tokenizers cannot load (a traceback later): refused when read, naming
    the file and, for bad bytes, the offset."""
    from rankdyn._errors import UsageError
    from rankdyn._trained._read import read_checkpoint

    with pytest.raises(UsageError, match=r"tokenizer.json: not UTF-8 text \(byte 3"):
        read_checkpoint(_checkpoint_files(tmp_path / "latin", tokenizer=b'{"a\xe9": 1}'))
    with pytest.raises(UsageError, match="tokenizer.json: not a tokenizer.json"):
        read_checkpoint(_checkpoint_files(tmp_path / "broken", tokenizer=b'{"version": "1.0"}'))


def test_load_checkpoint_takes_floating_dtypes_only(tmp_path):
    """``dtype=int32`` zeroed every weight and ``complex64`` was accepted: both refused now,
    before the file is read."""
    import jax.numpy as jnp

    from rankdyn._errors import UsageError
    from rankdyn.checkpoints import load_checkpoint

    for dtype in (jnp.int32, jnp.complex64, bool):
        with pytest.raises(UsageError, match="real floating dtype"):
            load_checkpoint(tmp_path / "nope", dtype=dtype)


def test_solve_flow_refuses_what_it_ignored_clamped_or_crashed_on():
    """NaN / inf in ``times`` (NaN everywhere), float16 and complex ``x0``, ``t1`` or ``saves``
    next to ``times`` (ignored), ``chunk <= 0`` (clamped), ``max_steps <= 0``, an observer that is
    not one, and a call under ``jax.jit``: each one UsageError, before any compile."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from rankdyn._errors import UsageError
    from rankdyn.flow import FlowField, solve_flow

    field = FlowField(np.ones((3, 3), bool), 2)
    x0 = jnp.asarray(np.random.default_rng(0).normal(size=(3, 2)))
    t = np.array([0.0, 1.0, 2.0])
    cases = [
        (dict(times=np.array([0.0, np.nan, 2.0])), "times must be finite"),
        (dict(times=np.array([0.0, 1.0, np.inf])), "times must be finite"),
        (dict(x0=x0.astype(jnp.float16), t1=1.0), "float32 or float64"),
        (dict(x0=x0.astype(jnp.complex64), t1=1.0), "x0 must be real"),
        (dict(times=t, t1=5.0), "either times= or t1"),
        (dict(times=t, saves=7), "either times= or t1"),
        (dict(t1=1.0, chunk=0), "chunk must be an integer >= 1"),
        (dict(t1=1.0, max_steps=0), "max_steps must be an integer >= 1"),
    ]
    for kwargs, words in cases:
        kwargs = {"x0": x0, **kwargs}
        with pytest.raises(UsageError, match=words):
            solve_flow(field, kwargs.pop("x0"), kwargs.pop("t1", None), beta=1.0, **kwargs)
    from rankdyn._flow._arguments import check_flow_arguments  # the tests' type checker would stop it first
    from rankdyn.flow import FlowObserver

    with pytest.raises(UsageError, match="observe must be a rankdyn.flow.FlowObserver"):
        check_flow_arguments(x0, 1.0, None, None, None, 10, lambda x: x, FlowObserver)
    with pytest.raises(UsageError, match="cannot run under jax.jit"):
        jax.jit(lambda x: solve_flow(field, x, 1.0, beta=1.0).summary)(x0)


def test_energy_does_not_overflow_and_large_beta_names_x64(tmp_path, capsys):
    """float32 at beta 90: the energy is finite and equals float64's (the old e^beta factor
    overflowed to inf and nulled every metric); a beta whose energy cannot be represented is
    refused naming --x64, before compute."""
    import numpy as np

    from rankdyn.flow import interaction_energy

    x = np.random.default_rng(1).normal(size=(6, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    e32 = float(interaction_energy(x.astype(np.float32), 90.0))
    g = x @ x.T
    oracle = np.exp(90.0 * g).sum() / (2 * 90.0 * 36)  # NumPy float64, the formula itself
    assert np.isfinite(e32) and abs(e32 / oracle - 1) < 1e-4
    assert main(["flow", "--beta", "200", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--beta 200" in err and "--x64" in err


# --- Silently ignored ---------------------------------------------------------------------------


def test_seed_reaches_the_random_mask_of_a_checkpoint_run(tmp_path, monkeypatch):
    """``--mask random --seed s`` with ``--checkpoint``: the old code built the mask with seed 0
    whatever ``--seed`` said (two seeds, one mu). The layers handed to simulate now differ, and
    equal the random path's mask for that seed."""
    pytest.importorskip("transformers")
    import numpy as np
    from checkpoint_models import WORDS, bert

    import rankdyn._run._simulate
    from rankdyn.masks import make_mask

    (tmp_path / "bert").mkdir()
    bert(tmp_path / "bert")
    text = tmp_path / "t.txt"
    text.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(60)))
    masks = []

    def capture(layer, *a, **k):
        masks.append(np.asarray(layer.mask))
        raise KeyboardInterrupt  # stop before compute (exit 130)

    monkeypatch.setattr(rankdyn._run._simulate, "simulate", capture)
    for seed in (1, 2):
        argv = ["simulate", "--checkpoint", str(tmp_path / "bert"), "--text", str(text), "--n", "12"]
        argv += ["--batch", "1", "--mask", "random", "--seed", str(seed), "--out", str(tmp_path / f"o{seed}")]
        assert main(argv) == 130
    assert not np.array_equal(masks[0], masks[1])
    assert np.array_equal(masks[1], make_mask("random", 12, seed=2))


# --- A zero row under a LayerNorm with eps ------------------------------------------------------


def test_layernorm_with_eps_maps_a_zero_row_to_its_bias_like_numpy():
    """BERT's centred LayerNorm with eps on a zero row and on a nearly-constant row, against a
    NumPy LayerNorm: the formula, not NaN and not "divide by 1"; the flag is kept."""
    import jax.numpy as jnp
    import numpy as np

    from rankdyn._model._norms import LayerNorm

    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 6))
    x[1] = 0.0
    x[2] = 3.0 + 1e-16 * np.arange(6)  # a spread at rounding level: flagged degenerate
    gain, bias = rng.normal(size=6), rng.normal(size=6)

    def numpy_ln(x, eps):
        xc = x - x.mean(-1, keepdims=True)
        return gain * xc / np.sqrt((xc**2).mean(-1, keepdims=True) + eps) + bias

    for eps in (1e-12, 1e-36):  # BERT's, and one below the row's spread (the old code divided by 1)
        y, bad = LayerNorm(gain, bias, eps=eps)(jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(y), numpy_ln(x, eps), rtol=1e-6, atol=1e-9)
        assert np.allclose(np.asarray(y)[1], bias) and bool(bad[1]) and bool(bad[2]) and not bool(bad[0])


def test_a_zero_token_keeps_mu_and_only_its_cosines_are_nan(getkey):
    """Attention dropout on a causal window without skip zeroes a row (both neighbours
    dropped); under LayerNorm with eps it maps to the bias (here 0). mu is defined there and
    reported, the cosines are NaN (undefined), the degenerate flag is set. The old scan dropped
    every metric of such a trajectory (mu null from then on)."""
    import jax.numpy as jnp
    import numpy as np

    import rankdyn as rd

    layer = rd.make_layer(
        getkey(),
        n=6,
        d=4,
        mask="causal",
        window=1,
        placement="post",
        ln="layernorm",
        skip=False,
        attn_dropout=0.7,
    )
    x0 = jnp.asarray(np.random.default_rng(0).normal(size=(3, 6, 4)))
    traj = rd.simulate(layer, x0, 6, metrics="mu,min_cos", key=getkey(), save_states=True)
    states = np.asarray(traj.states)
    zero = np.all(states == 0, axis=-1).any(axis=(0, 2))  # a saved layer with a zero token
    assert zero.any(), "the case must produce a zero row"
    mu = np.asarray(traj.summary.mean["mu"]) if hasattr(traj.summary, "mean") else None
    assert mu is not None and np.all(np.isfinite(mu))
    assert np.all(np.isnan(np.asarray(traj.summary.mean["min_cos"])[zero]))
    assert int(traj.summary.degenerate) >= 1


# --- Wrong causes and tracebacks ----------------------------------------------------------------


def test_pooling_config_is_not_taken_for_the_model_config(tmp_path):
    """Weights next to a sentence-transformers ``1_Pooling/config.json`` and no model config:
    the old reader took the pooling config ("model_type None is not supported"); the refusal
    now names the missing file."""
    import zipfile

    from rankdyn._errors import UsageError
    from rankdyn.checkpoints import load_checkpoint

    path = tmp_path / "pooled.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("model.safetensors", _safetensors_variants()[0])
        z.writestr("1_Pooling/config.json", '{"pooling_mode_mean_tokens": true}')
    with pytest.raises(UsageError, match="has no config.json"):
        load_checkpoint(path)


def test_file_size_limit_is_a_user_error(tmp_path):
    """EFBIG (``ulimit -f``) is one error line naming the file, as ENOSPC is; it was a raw
    OSError (a traceback)."""
    import errno

    from rankdyn._errors import UsageError
    from rankdyn._run import _io

    def too_big(f):
        raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))

    with pytest.raises(UsageError, match="ulimit -f"):
        _io.atomic_write(tmp_path / "big.json", too_big, binary=False)
    assert list(tmp_path.iterdir()) == []
