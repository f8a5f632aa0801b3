"""Entry point of ./scripts/segment: a segmentation pipeline's masks from a running server (devtools.client with
devtools.clients.segmentation)."""

import sys

from devtools.client import script_main

if __name__ == "__main__":
    sys.exit(script_main("segmentation"))
