"""Entry point of ./scripts/detect: a detection pipeline's boxes and labels from a running server (devtools.client with
devtools.clients.detection)."""

import sys

from devtools.client import script_main

if __name__ == "__main__":
    sys.exit(script_main("detection"))
