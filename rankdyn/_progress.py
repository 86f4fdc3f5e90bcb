"""Progress bars for long runs (simulate chunks, sweeps, censuses, basins, reproduce targets)."""

from __future__ import annotations

__all__ = ["progress_bar"]


def progress_bar(*args, **kwargs):
    """A ``tqdm`` bar: the notebook widget where ipywidgets is installed, plain text otherwise.

    ``tqdm.auto`` picks the widget in Jupyter even without ipywidgets and then warns
    (``TqdmWarning: IProgress not found``) into every notebook's output; the text bar does not.
    """
    try:
        import ipywidgets  # noqa: F401  (only probed)
        from tqdm.auto import tqdm
    except ImportError:
        from tqdm import tqdm
    return tqdm(*args, **kwargs)
