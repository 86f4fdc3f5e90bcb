"""The notebooks as tests (pytest --nbmake): run every cell at smaller sizes.

The last step of the README's test command, after the suite:
``python3 -m pytest --nbmake notebooks tests/site`` (pyproject.toml's testpaths is ``tests``).

Each notebook's first code cell reads ``RANKDYN_NOTEBOOK_QUICK``: set, it runs at sizes that check
that every cell still runs, in a fraction of the time; the committed outputs (and a reader's run)
use the full sizes. The kernel nbmake starts inherits this process's environment.
"""

import os

os.environ["RANKDYN_NOTEBOOK_QUICK"] = "1"


def pytest_collection_modifyitems(config, items):
    """Every notebook run is slow (tens of seconds each): ``-m "not slow"`` leaves them out, the
    test command's notebook step runs them (the marker only selects)."""
    import pytest

    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
