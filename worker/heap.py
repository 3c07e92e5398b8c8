"""The long-lived processes (``python -m worker``, the API server) put what start-up built —
modules, settings, the application and its routes — out of the garbage collector's reach once
it is built (``gc.freeze``). A full collection otherwise walks all of it again, every time:
on the API server under ingestion that was a pause of about 150 ms now and then (28 ms frozen),
most of the spread between the ingestion bench's rounds and the clients' p99 (issue 35 item 5).
Only for processes that own their interpreter: never called from the SDK or a library path."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect what start-up left as garbage, then freeze every object still alive."""
    gc.collect()
    gc.freeze()
