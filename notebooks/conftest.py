"""The notebooks as tests (pytest --nbmake): run every cell at smaller sizes.

Each notebook's first code cell reads ``RANKDYN_NOTEBOOK_QUICK``: set, it runs at sizes that check
that every cell still runs, in a fraction of the time; the committed outputs (and a reader's run)
use the full sizes. The kernel nbmake starts inherits this process's environment.
"""

import os

os.environ["RANKDYN_NOTEBOOK_QUICK"] = "1"
