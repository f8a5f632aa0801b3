"""Entry point of ./scripts/serve: the local tritonserver with every pipeline (devtools.triton_server)."""

import sys

from devtools.triton_server import main

if __name__ == "__main__":
    sys.exit(main())
