"""The notebooks as tests (pytest --nbmake): run every cell at smaller sizes.

The last step of the README's test command, after the suite:
``python3 -m pytest --nbmake notebooks tests/site`` (pyproject.toml's testpaths is ``tests``).

Each notebook's first code cell reads ``RANKDYN_NOTEBOOK_QUICK``: set, it runs at sizes that check
that every cell still runs, in a fraction of the time; the committed outputs (and a reader's run)
use the full sizes. The kernel nbmake starts inherits this process's environment.
"""

import os

import pytest

os.environ["RANKDYN_NOTEBOOK_QUICK"] = "1"
# One OpenBLAS thread per kernel, as tests/conftest.py sets for the suite's processes (two kernels
# run at once on two cores; OpenBLAS's extra threads would spin).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


#: Wall seconds of each notebook's quick run in the clean-clone CI run (two workers), and of the
#: documentation site's file: the order in which the step hands them out.
SECONDS = {
    "05_trained_models.ipynb": 36,
    "07_continuation.ipynb": 26,
    "08_lyapunov.ipynb": 23,
    "06_flow.ipynb": 20,
    "09_densities_and_noise.ipynb": 18,
    "03_equilibria_and_stability.ipynb": 17,
    "test_docs_site.py": 16,
    "04_sweeping_thousands.ipynb": 14,
    "02_layernorm_counterexample.ipynb": 14,
    "01_masks_and_collapse.ipynb": 11,
}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Every notebook run is slow (tens of seconds each): ``-m "not slow"`` leaves them out, the
    test command's notebook step runs them (the marker only selects).

    The longest file first (after tests/conftest.py's order, which sees every notebook as one slow
    test and so keeps them in name order): ``--dist loadfile`` gives each free worker the next
    file, so with 05 (the longest) handed out first rather than fifth the two workers end within
    about one short notebook of each other (in name order one ran 200 s, the other 132 s)."""
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: -SECONDS.get(os.path.basename(str(item.fspath)), 0))  # stable
