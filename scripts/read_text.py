"""Entry point of ./scripts/read-text: a text reading pipeline's lines from a running server (devtools.client with
devtools.clients.text_reading)."""

import sys

from devtools.client import script_main

if __name__ == "__main__":
    sys.exit(script_main("text_reading"))
