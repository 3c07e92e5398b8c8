"""``python -m api [--host H] [--port P]``: the same as ``replaybook api``."""

import sys

from cli.main import app

if __name__ == "__main__":
    app(["api", *sys.argv[1:]], prog_name="replaybook")
