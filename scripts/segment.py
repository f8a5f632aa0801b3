"""Entry point of ./scripts/segment: person masks from a running server (devtools.segment_client)."""

import sys

from devtools.segment_client import main

if __name__ == "__main__":
    sys.exit(main())
