"""Entry point of ./scripts/depth: a depth pipeline's maps from a running server (devtools.client with
devtools.clients.depth)."""

import sys

from devtools.client import script_main

if __name__ == "__main__":
    sys.exit(script_main("depth"))
