"""``replaybook-sdk``: send what is spooled (``flush``), show it (``status``).

Exit codes: 0 everything sent (or nothing to do), 1 something is left (the server is down or
refused it; it stays in the spool), 2 bad usage."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from replaybook._config import Config
from replaybook._sender import Sender
from replaybook._spool import ACK_SUFFIX, REFUSED_DIR, spool_files


def _config(args: argparse.Namespace) -> Config:
    return Config.from_env().updated(
        url=args.url, token=args.token, spool_dir=args.spool_dir, exit_timeout=args.timeout
    )


def _flush(config: Config, as_json: bool) -> int:
    sender = Sender(config)
    adopted = sender.adopt_orphans()
    done = sender.drain(config.exit_timeout, give_up_when_down=False) if adopted else True
    sender.shutdown_quietly()
    left = len(spool_files(config.spool_dir))
    summary = {
        "runs": adopted,
        "events_sent": sender.sent_events,
        "left": left,
        "errors": sender.errors,
        "spool_dir": str(config.spool_dir),
    }
    if as_json:
        print(json.dumps(summary))
    else:
        print(
            f"sent {sender.sent_events} events of {adopted} runs; {left} spool files left"
            + "".join(f"\n  {e}" for e in sender.errors)
        )
    return 0 if done and not sender.errors else 1


def _status(config: Config, as_json: bool) -> int:
    rows = []
    for path in spool_files(config.spool_dir):
        size = path.stat().st_size
        try:
            acked = int(path.with_suffix(ACK_SUFFIX).read_text() or 0)
        except (FileNotFoundError, ValueError):
            acked = 0
        rows.append(
            {"run_id": path.name[: -len(".jsonl")], "bytes": size, "unsent_bytes": size - acked}
        )
    refused = sorted(p.name for p in (Path(config.spool_dir) / REFUSED_DIR).glob("*.jsonl"))
    if as_json:
        print(json.dumps({"spooled": rows, "refused": refused}))
    else:
        for row in rows:
            print(f"{row['run_id']}  {row['unsent_bytes']} bytes unsent")
        for name in refused:
            print(f"refused: {name}")
    return 0


def _options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """The options, before the command (with their defaults) and after it (``flush --url U``):
    after it they are left out unless given, so they never undo the ones given before it."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--url", default=default(None), help="the Replaybook API (default REPLAYBOOK_URL)"
    )
    parser.add_argument(
        "--token",
        default=default(None),
        help="a token allowed to ingest (default REPLAYBOOK_TOKEN)",
    )
    parser.add_argument(
        "--spool-dir",
        default=default(None),
        help="default REPLAYBOOK_SPOOL_DIR or ~/.cache/replaybook/spool",
    )
    parser.add_argument(
        "--timeout", type=float, default=default(60.0), help="seconds to keep trying"
    )
    parser.add_argument("--json", action="store_true", default=default(False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replaybook-sdk", description=__doc__)
    _options(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True)
    _options(
        sub.add_parser("flush", help="send every spooled run of processes that are gone"), False
    )
    _options(sub.add_parser("status", help="list the spooled runs"), False)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    config = _config(args)
    if args.command == "flush":
        if not config.url:
            print(
                "replaybook-sdk: flush: no server: give --url or set REPLAYBOOK_URL",
                file=sys.stderr,
            )
            return 2
        return _flush(config, args.json)
    return _status(config, args.json)


if __name__ == "__main__":
    sys.exit(main())
