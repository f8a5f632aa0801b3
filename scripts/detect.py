"""Entry point of ./scripts/detect: face boxes from a running server (devtools.detect_client)."""

import sys

from devtools.detect_client import main

if __name__ == "__main__":
    sys.exit(main())
