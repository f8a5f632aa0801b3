"""Entry point of ./scripts/classify: classify images with a running server (devtools.client)."""

import sys

from devtools.client import main

if __name__ == "__main__":
    sys.exit(main())
