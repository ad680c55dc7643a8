"""``python -m harnessnb``: the ``harnessnb`` command (see ``harnessnb.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
