"""Trained checkpoints (BERT, GPT-2; HF layout) as rankdyn layer stacks, and real text as tokens.

See docs/theory.md#trained-checkpoints. Typical use::

    ckpt = load_checkpoint(minilm_path())
    ids = ckpt.tokenize_text(default_corpus().text, n=128, batch=64)
    traj = rankdyn.simulate(ckpt.layers(128, "san"), ckpt.embed(ids), ckpt.num_layers)
"""

from ._trained import SUPPORTED as SUPPORTED
from ._trained import VARIANTS as VARIANTS
from ._trained import Checkpoint as Checkpoint
from ._trained import Corpus as Corpus
from ._trained import Embeddings as Embeddings
from ._trained import default_corpus as default_corpus
from ._trained import load_checkpoint as load_checkpoint
from ._trained import minilm_path as minilm_path

__all__ = [
    "load_checkpoint",
    "Checkpoint",
    "Embeddings",
    "VARIANTS",
    "SUPPORTED",
    "Corpus",
    "default_corpus",
    "minilm_path",
]
