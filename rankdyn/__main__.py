"""``python -m rankdyn``: the same command line as the ``rankdyn`` script."""

import sys

from .cli import main

sys.exit(main())
