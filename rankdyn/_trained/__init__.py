"""Trained checkpoints as rankdyn layer stacks (private; the public names are in `rankdyn.checkpoints`).

The names below load lazily: ``rankdyn checkpoints`` lists the installed checkpoints through
`rankdyn._trained._installed` without importing JAX (it took 12 s to print three names).
"""

from importlib import import_module

#: Public name -> the module of this folder that defines it.
_LAZY = {
    "SUPPORTED": "._parts",
    "Embeddings": "._parts",
    "VARIANTS": "._stack",
    "Checkpoint": "._stack",
    "load_checkpoint": "._stack",
    "Corpus": "._text",
    "default_corpus": "._text",
    "minilm_path": "._text",
}

__all__ = list(_LAZY)


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = value  # once: later look-ups do not come here
    return value
