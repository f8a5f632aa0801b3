"""Entry point of ./scripts/detect: a detection pipeline's boxes and labels from a running server (devtools.client)."""

import sys

from devtools.client import main

if __name__ == "__main__":
    sys.exit(main("detection", "face_detector", "detect"))
