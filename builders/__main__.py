"""``python -m builders``: see :mod:`builders.cli`."""

import sys

from builders.cli import main

sys.exit(main())
