"""Trained checkpoints (BERT, GPT-2; HF layout) as rankdyn layer stacks, and real text as tokens.

See docs/theory.md#trained-checkpoints. Typical use::

    ckpt = load_checkpoint(minilm_path())
    ids = ckpt.tokenize_text(default_corpus().text, n=128, batch=64)
    traj = rankdyn.simulate(ckpt.layers(128, "san"), ckpt.embed(ids), ckpt.num_layers)
"""

from ._checkpoints import SUPPORTED as SUPPORTED
from ._checkpoints import VARIANTS as VARIANTS
from ._checkpoints import Checkpoint as Checkpoint
from ._checkpoints import Corpus as Corpus
from ._checkpoints import Embeddings as Embeddings
from ._checkpoints import default_corpus as default_corpus
from ._checkpoints import load_checkpoint as load_checkpoint
from ._checkpoints import minilm_path as minilm_path

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
