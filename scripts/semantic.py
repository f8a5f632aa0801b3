"""Entry point of ./scripts/semantic: a semantic segmentation pipeline's class maps from a running server
(devtools.client with devtools.clients.semantic_segmentation)."""

import sys

from devtools.client import script_main

if __name__ == "__main__":
    sys.exit(script_main("semantic_segmentation"))
