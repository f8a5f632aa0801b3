"""Entry point of ./scripts/segment: a segmentation pipeline's masks from a running server (devtools.client)."""

import sys

from devtools.client import main

if __name__ == "__main__":
    sys.exit(main("segmentation", "person_segmenter", "segment"))
