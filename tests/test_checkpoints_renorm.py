"""Trained checkpoints re-normalised: ``ckpt.layers(n, placement=..., ln=...)``.

The trained attention and MLP weights stay, the normalisation changes. Oracles: each
checkpoint's own scheme chosen explicitly equals the ``full`` variant bit for bit (which
test_checkpoints checks against HF's forward pass), and other schemes equal a NumPy layer built
from HF's own state dict (trained gains kept by RMSNorm, biases dropped; the sphere of radius
sqrt(d) drops both).
"""

import math

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")

from checkpoint_models import bert, gpt2_zip  # noqa: E402
from helpers import jit_call  # noqa: E402

from rankdyn._errors import UsageError  # noqa: E402
from rankdyn._model._norms import LayerNorm, RMSNorm, SphereNorm  # noqa: E402
from rankdyn._trained._stack import _run_stack  # noqa: E402
from rankdyn.checkpoints import load_checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """{"bert": (path, hf model), "gpt2": (zip path, hf model)}; BERT's LayerNorm gains and biases
    drawn at random (HF initialises them to 1 and 0, which could not tell kept from dropped)."""
    import torch

    folder = tmp_path_factory.mktemp("ckpt")
    (folder / "bert").mkdir()
    hf = bert(folder / "bert")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, prm in hf.named_parameters():
            if "LayerNorm" in name:
                base = 1.0 if name.endswith("weight") else 0.0
                prm.copy_(base + 0.5 * torch.randn(prm.shape, generator=gen, dtype=prm.dtype))
    hf.save_pretrained(folder / "bert", safe_serialization=True)
    return {"bert": (folder / "bert", hf), "gpt2": gpt2_zip(folder)}


@pytest.mark.slow
def test_own_scheme_chosen_explicitly_equals_full_bit_for_bit(tiny):
    for arch in ("bert", "gpt2"):
        ckpt = load_checkpoint(tiny[arch][0], dtype="float64")
        x0 = ckpt.embed(np.random.default_rng(0).integers(0, 40, (2, 6)))
        full = ckpt.layers(6)
        own = ckpt.layers(6, placement=ckpt.placement, ln="layernorm")
        assert type(full.norm) is type(own.norm) is LayerNorm  # the norm applied, not a SphereNorm
        assert type(ckpt.layers(6, "san-ln").norm) is LayerNorm
        depth = 2 * ckpt.num_layers + 1
        a, b = _run_stack(full, x0, depth), _run_stack(own, x0, depth)
        assert np.array_equal(np.asarray(a), np.asarray(b)), arch
        other = _run_stack(ckpt.layers(6, ln="rms"), x0, depth)  # the check can see a change
        assert np.abs(np.asarray(other) - np.asarray(a))[:, 1:].max() > 1e-3


def _gelu(x, exact):
    if exact:
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _parts(arch, hf, i):
    """HF layer i as NumPy: attention (q, k, v, o as (W (in, out), b)), MLP, the two norms' gains."""
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    if arch == "bert":
        p = f"encoder.layer.{i}."
        lin = lambda name: (sd[p + name + ".weight"].T, sd[p + name + ".bias"])  # noqa: E731
        att = [lin(f"attention.self.{k}") for k in ("query", "key", "value")] + [
            lin("attention.output.dense")
        ]
        mlp = (lin("intermediate.dense"), lin("output.dense"))
        gains = (sd[p + "attention.output.LayerNorm.weight"], sd[p + "output.LayerNorm.weight"])
        return att, mlp, gains, hf.config.layer_norm_eps
    p = f"h.{i}."
    w, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]
    att = list(zip(np.split(w, 3, axis=1), np.split(b, 3))) + [
        (sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"])
    ]
    lin = lambda name: (sd[p + name + ".weight"], sd[p + name + ".bias"])  # noqa: E731
    mlp = (lin("mlp.c_fc"), lin("mlp.c_proj"))
    return att, mlp, (sd[p + "ln_1.weight"], sd[p + "ln_2.weight"]), hf.config.layer_norm_epsilon


def _np_attention(x, att, heads, mask):
    n, d = x.shape
    split = lambda y: y.reshape(n, heads, -1).transpose(1, 0, 2)  # noqa: E731
    qh, kh, vh = (split(x @ w + b) for w, b in att[:3])
    s = np.where(mask, qh @ kh.transpose(0, 2, 1) / np.sqrt(d // heads), -np.inf)
    a = np.exp(s - s.max(-1, keepdims=True))
    a /= a.sum(-1, keepdims=True)
    return (a @ vh).transpose(1, 0, 2).reshape(n, d) @ att[3][0] + att[3][1]


@pytest.mark.parametrize(
    "arch, placement, ln",
    [
        ("bert", "peri", "rms"),
        pytest.param("gpt2", "post", "sphere", marks=pytest.mark.slow),
        ("bert", "lns", "layernorm"),
    ],
)
def test_renormalised_layer_against_numpy_from_hf_weights(tiny, arch, placement, ln):
    path, hf = tiny[arch]
    ckpt = load_checkpoint(path, dtype="float64")
    n, t = 6, 1
    x = np.random.default_rng(3).normal(size=(n, ckpt.d)) * 2
    mask = np.tril(np.ones((n, n), bool)) if arch == "gpt2" else np.ones((n, n), bool)
    att, (fc, proj), gains, eps = _parts(arch, hf, t)
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    biases = (
        (
            sd[f"encoder.layer.{t}.attention.output.LayerNorm.bias"],
            sd[f"encoder.layer.{t}.output.LayerNorm.bias"],
        )
        if arch == "bert"
        else None
    )

    def norm(y, j):
        if ln == "sphere":  # gains and biases dropped, radius sqrt(d)
            return np.sqrt(ckpt.d) * y / np.linalg.norm(y, axis=-1, keepdims=True)
        if ln == "rms":  # gain kept, bias dropped
            return gains[j] * y / np.sqrt(np.mean(y**2, axis=-1, keepdims=True) + eps)
        yc = y - y.mean(-1, keepdims=True)  # the trained LayerNorm, as trained
        return gains[j] * yc / np.sqrt(np.mean(yc**2, axis=-1, keepdims=True) + eps) + biases[j]

    subs = (
        lambda y: _np_attention(y, att, ckpt.heads, mask),
        lambda y: _gelu(y @ fc[0] + fc[1], arch == "bert") @ proj[0] + proj[1],
    )
    y = x
    for j, f in enumerate(subs):
        if placement == "peri":
            y = y + norm(f(norm(y, j)), j)
        elif placement == "post":
            y = norm(y + f(y), j)
        else:  # lns at depth t
            y = y + f(norm(y, j) / np.sqrt(t + 1))
    layer = ckpt.layers(n, placement=placement, ln=ln)
    assert isinstance(layer.norm, {"rms": RMSNorm, "sphere": SphereNorm, "layernorm": LayerNorm}[ln])
    got, _ = jit_call(layer, jnp.asarray(x), t)  # one program (eager: about 50 per case)
    np.testing.assert_allclose(got, y, rtol=1e-11, atol=1e-11 * np.abs(y).max())


def test_renormalisation_is_refused_where_it_cannot_apply(tiny):
    ckpt = load_checkpoint(tiny["bert"][0], dtype="float64")
    cases = [
        (dict(variant="san-ln", placement="pre"), "variant='full'"),
        (dict(variant="san", ln="rms"), "variant='full'"),
        (dict(placement="ngpt", ngpt_alpha=0.5), "ln='sphere'"),
        (dict(placement="ngpt", ln="rms", ngpt_alpha=0.5), "ln='sphere'"),
        (dict(placement="mix", ln="rms"), "mix_layers"),
        (dict(placement="post", ngpt_alpha=0.5), "ngpt_alpha"),
        (dict(placement="none", ln="rms"), "ignored by placement='none'"),
        (dict(placement="middle"), "placement 'middle' is unknown"),
        (dict(ln="batchnorm"), "ln 'batchnorm' is unknown"),
    ]
    for kwargs, needle in cases:
        with pytest.raises(UsageError) as err:
            ckpt.layers(6, **kwargs)
        assert needle in str(err.value), kwargs


def _ids_file(tmp_path):
    path = tmp_path / "ids.npy"
    np.save(path, np.random.default_rng(0).integers(3, 40, (2, 6)).astype(np.int32))
    return str(path)


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--placement", "ngpt", "--ngpt-alpha", "0.5"], ["--placement ngpt", "add --ln sphere"]),
        (["--variant", "san", "--ln", "rms"], ["--ln", "--variant full", "not --variant san"]),
        (
            ["--placement", "mix", "--mix-layers", "5", "--num-layers", "4"],
            ["--mix-layers 5 is outside [0, --num-layers 4]"],
        ),
        (["--placement", "mix"], ["--placement mix needs --mix-layers"]),
        (["--placement", "ngpt", "--ln", "sphere", "--ngpt-alpha", "2"], ["--ngpt-alpha 2.0", "(0, 1]"]),
        (["--mix-layers", "1"], ["--mix-layers 1 is ignored"]),
        (["--placement", "none", "--ln", "rms"], ["--ln rms is ignored by --placement none"]),
    ],
)
def test_cli_renormalisation_refusals(tiny, tmp_path, capsys, monkeypatch, flags, fragments):
    import rankdyn._run._simulate
    from rankdyn.cli import main

    def no_compute(*a, **k):
        raise AssertionError("simulate ran")

    monkeypatch.setattr(rankdyn._run._simulate, "simulate", no_compute)
    argv = ["simulate", "--checkpoint", str(tiny["bert"][0]), "--input-ids", _ids_file(tmp_path), *flags]
    assert main([*argv, "--no-progress", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rankdyn simulate: error: "), err
    for fragment in fragments:
        assert fragment in err[0], (fragment, err[0])


@pytest.mark.slow  # end to end: a compiled run
def test_cli_runs_a_renormalised_checkpoint(tiny, tmp_path):
    import json

    from rankdyn.cli import main

    out = tmp_path / "out"
    argv = ["simulate", "--checkpoint", str(tiny["bert"][0]), "--input-ids", _ids_file(tmp_path)]
    argv += ["--placement", "peri", "--ln", "rms", "--num-layers", "3", "--metrics", "mu", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    cfg = json.loads((out / "metrics.json").read_text())["config"]
    assert (cfg["placement"], cfg["ln"], cfg["arch"]) == ("peri", "rms", "bert")
