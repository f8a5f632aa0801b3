"""Entry point of ./scripts/classify: a classification pipeline's answers from a running server (devtools.client with
devtools.clients.classification)."""

import sys

from devtools.client import script_main

if __name__ == "__main__":
    sys.exit(script_main("classification"))
