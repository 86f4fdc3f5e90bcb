"""Trained checkpoints as rankdyn layer stacks (private; the public names are in `rankdyn.checkpoints`)."""

from ._parts import SUPPORTED as SUPPORTED
from ._parts import Embeddings as Embeddings
from ._stack import VARIANTS as VARIANTS
from ._stack import Checkpoint as Checkpoint
from ._stack import load_checkpoint as load_checkpoint
from ._text import Corpus as Corpus
from ._text import default_corpus as default_corpus
from ._text import minilm_path as minilm_path
