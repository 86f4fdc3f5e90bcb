"""The notebooks as tests (pytest --nbmake): run every cell at smaller sizes.

The last step of the README's test command, after the suite:
``python3 -m pytest --nbmake notebooks tests/site`` (pyproject.toml's testpaths is ``tests``).

Each notebook's first code cell reads ``RANKDYN_NOTEBOOK_QUICK``: set, it runs at sizes that check
that every cell still runs, in a fraction of the time; the committed outputs (and a reader's run)
use the full sizes. The kernel nbmake starts inherits this process's environment.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

os.environ["RANKDYN_NOTEBOOK_QUICK"] = "1"
# One OpenBLAS thread per kernel, as tests/conftest.py sets for the suite's processes (two kernels
# run at once on two cores; OpenBLAS's extra threads would spin).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def pytest_configure(config):
    """The kernels' garbage collector at `rankdyn.cli.GC_THRESHOLD`, as the suite's processes have
    it, through an IPython startup file in a folder of this process's own (``IPYTHONDIR``, which
    the kernels inherit): a kernel holds JAX's and matplotlib's objects, and each full collection
    walks them. The folder goes with the session."""
    from rankdyn.cli import GC_THRESHOLD

    folder = tempfile.mkdtemp(prefix="rankdyn-notebook-ipython-")
    startup = Path(folder, "profile_default", "startup")
    startup.mkdir(parents=True)
    (startup / "00-gc-threshold.py").write_text(f"import gc\n\ngc.set_threshold(*{GC_THRESHOLD!r})\n")
    os.environ["IPYTHONDIR"] = folder
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


#: The order in which the step hands out its files (and the site's file). ``--dist loadfile``
#: commits each worker to its next file while its current one runs (pytest-xdist gives a worker
#: another unit whenever it holds two or fewer pending tests), so longest-first does not balance
#: the two workers: in the clean-clone runs they ended 7-15 s apart. This order is the one with the
#: smallest mean finish of the slower worker when that hand-out is replayed on the files' measured
#: seconds, with noise (benchmarks/notebook_order.py).
ORDER = (
    "05_trained_models.ipynb",
    "06_flow.ipynb",
    "02_layernorm_counterexample.ipynb",
    "07_continuation.ipynb",
    "08_lyapunov.ipynb",
    "09_densities_and_noise.ipynb",
    "03_equilibria_and_stability.ipynb",
    "test_docs_site.py",
    "04_sweeping_thousands.ipynb",
    "01_masks_and_collapse.ipynb",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Every notebook run is slow (tens of seconds each): ``-m "not slow"`` leaves them out, the
    test command's notebook step runs them (the marker only selects). The files go in `ORDER`
    (after tests/conftest.py's order, which sees every notebook as one slow test); a file missing
    from it goes last."""
    for item in items:
        if str(item.fspath).endswith(".ipynb"):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(ORDER)}
    items.sort(key=lambda item: rank.get(os.path.basename(str(item.fspath)), len(ORDER)))  # stable
