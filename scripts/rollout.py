"""Entry point: roll a new model version out on a running server, with rollback (devtools.rollout)."""

import sys

from devtools.rollout import main

if __name__ == "__main__":
    sys.exit(main())
