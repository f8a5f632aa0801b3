"""Entry point of ./scripts/gateway: the image gateway (gateway.cli)."""

import sys

from gateway.cli import main

if __name__ == "__main__":
    sys.exit(main())
