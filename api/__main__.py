"""``python -m api [--host H] [--port P]``: the same as ``replaybook api``."""

import argparse
import os
import sys

from api.serve import DEFAULT_HOST, DEFAULT_PORT, serve
from models.errors import InvalidInputError, ReplaybookError

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m api", description="Serve the HTTP API.")
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("REPLAYBOOK_API_PORT") or DEFAULT_PORT)
    )
    args = parser.parse_args()
    try:
        serve(args.host, args.port)
    except ReplaybookError as exc:
        print(f"replaybook: api: {exc}", file=sys.stderr)
        # the CLI's exit codes: 2 bad configuration, 4 a store or service failed
        sys.exit(2 if isinstance(exc, InvalidInputError) else 4)
