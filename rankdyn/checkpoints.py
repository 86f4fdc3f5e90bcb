"""Trained checkpoints (BERT, GPT-2; HF layout) as rankdyn layer stacks, and real text as tokens.

See docs/theory.md#trained-checkpoints. Typical use::

    ckpt = load_checkpoint(minilm_path())
    ids = ckpt.tokenize_text(default_corpus().text, n=128, batch=64)
    traj = rankdyn.simulate(ckpt.layers(128, "san"), ckpt.embed(ids), ckpt.num_layers)
"""

from ._trained._analysis import attractor_census as attractor_census
from ._trained._analysis import collapsed_equilibria as collapsed_equilibria
from ._trained._analysis import iterate_map as iterate_map
from ._trained._analysis import leading_multipliers as leading_multipliers
from ._trained._analysis import matrix_summary as matrix_summary
from ._trained._analysis import orthogonality_distance as orthogonality_distance
from ._trained._analysis import theory_layer as theory_layer
from ._trained._analysis import value_output_report as value_output_report
from ._trained._parts import SUPPORTED as SUPPORTED
from ._trained._parts import Embeddings as Embeddings
from ._trained._stack import VARIANTS as VARIANTS
from ._trained._stack import Checkpoint as Checkpoint
from ._trained._stack import load_checkpoint as load_checkpoint
from ._trained._text import Corpus as Corpus
from ._trained._text import default_corpus as default_corpus
from ._trained._text import minilm_path as minilm_path

__all__ = [
    "load_checkpoint",
    "Checkpoint",
    "Embeddings",
    "VARIANTS",
    "SUPPORTED",
    "Corpus",
    "default_corpus",
    "minilm_path",
    "attractor_census",
    "collapsed_equilibria",
    "iterate_map",
    "leading_multipliers",
    "matrix_summary",
    "orthogonality_distance",
    "theory_layer",
    "value_output_report",
]
