"""Entry point of ./scripts/classify: a classification pipeline's answers from a running server (devtools.client)."""

import sys

from devtools.client import main

if __name__ == "__main__":
    sys.exit(main("classification", "image_classifier", "classify"))
