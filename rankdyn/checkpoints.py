"""Trained checkpoints as rankdyn layer stacks, and real text as tokens.

Supported families (`SUPPORTED`): BERT, GPT-2, MPNet and the Llama family (e.g. SmolLM2), in the
Hugging Face layout (a folder or a ``.zip`` with ``config.json`` and ``model.safetensors``) or, for
the Llama family, a llama.cpp ``.gguf`` file (SmolLM2's GGUF).

See docs/theory.md#trained-checkpoints. Typical use::

    ckpt = load_checkpoint(minilm_path())
    ids = ckpt.tokenize_text(default_corpus().text, n=128, batch=64)
    traj = rankdyn.simulate(ckpt.layers(128, "san"), ckpt.embed(ids), ckpt.num_layers)
"""

from ._trained._analysis import (
    attractor_census as attractor_census,
    collapsed_equilibria as collapsed_equilibria,
    iterate_map as iterate_map,
    leading_multipliers as leading_multipliers,
    matrix_summary as matrix_summary,
    orthogonality_distance as orthogonality_distance,
    theory_layer as theory_layer,
    value_output_report as value_output_report,
)
from ._trained._parts import SUPPORTED as SUPPORTED, Embeddings as Embeddings
from ._trained._stack import (
    VARIANTS as VARIANTS,
    Checkpoint as Checkpoint,
    load_checkpoint as load_checkpoint,
)
from ._trained._text import Corpus as Corpus, default_corpus as default_corpus, minilm_path as minilm_path
