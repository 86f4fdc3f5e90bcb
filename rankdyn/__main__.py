"""``python -m rankdyn``: the same command line as the ``rankdyn`` script."""

import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while the command line loads, before main() installs its handler
    print("\nrankdyn: interrupted; nothing was saved.", file=sys.stderr, flush=True)
    sys.exit(130)

sys.exit(main())
