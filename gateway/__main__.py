"""``python -m gateway``: the gateway (:mod:`gateway.cli`), as the gateway image runs it."""

import sys

from .cli import main

sys.exit(main())
