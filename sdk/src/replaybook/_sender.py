"""The background sender: one daemon thread per process takes what the runs spooled and posts
it to the ingestion API in batches (``POST /api/runs``, ``POST /api/runs/{id}/events``).

Ingestion is idempotent (an event is named by its run and the client's sequence), so whatever
was sent but not acknowledged is simply sent again. The server down or answering 5xx/429: the
events stay in the spool and the sender retries with a growing pause. A refusal (4xx) is final
for that run: its file is set aside in ``refused/`` and the error logged. Nothing here raises
into the agent.
"""

from __future__ import annotations

import atexit
import threading
import time

import httpx

from replaybook._config import Config, log
from replaybook._spool import Item, RunSpool, spool_files


class Unavailable(Exception):
    """The server cannot take it now (unreachable, 5xx, 429): keep it and retry later."""


class Refused(Exception):
    """The server refused it for good (4xx): retrying sends the same refusal."""


class Blocked(Exception):
    """401/403: the token is missing or may not ingest; nothing is sent until reconfigured."""


class Sender:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._spools: dict[str, RunSpool] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._client: httpx.Client | None = None
        self._retry_at = 0.0
        self._backoff = 0.0
        self._blocked: str | None = None
        #: failures since the start (strict mode raises them at the run's end)
        self.errors: list[str] = []
        self.sent_events = 0
        self._warned_no_url = False

    # -- the agent's side -------------------------------------------------------------------

    def add(self, spool: RunSpool) -> None:
        with self._lock:
            self._spools[spool.run_id] = spool
        self._start()

    def notify(self, urgent: bool = False) -> None:
        """New lines were spooled; ``urgent``: send now rather than at the next interval."""
        if urgent:
            self._wake.set()

    def adopt_orphans(self) -> int:
        """Take over the spool files of processes that are gone (sent from the next round)."""
        adopted = 0
        for path in spool_files(self.config.spool_dir):
            run_id = path.name[: -len(".jsonl")]
            with self._lock:
                if run_id in self._spools:
                    continue
            spool = RunSpool.adopt(path)
            if spool is None:
                continue
            with self._lock:
                self._spools[run_id] = spool
            adopted += 1
        if adopted:
            self._start()
        return adopted

    def drain(self, timeout: float, give_up_when_down: bool = False) -> bool:
        """Send everything spooled; True when the server holds it all within ``timeout``."""
        deadline = time.monotonic() + timeout
        if self._thread is None or not self._thread.is_alive():
            return self._drain_here(deadline, give_up_when_down)
        self._retry_at = 0.0
        self._wake.set()
        with self._idle:
            while not self._all_sent():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if give_up_when_down and self._backoff > 0:
                    return False
                self._idle.wait(min(left, 0.05))
                self._wake.set()
        return True

    def _drain_here(self, deadline: float, give_up_when_down: bool) -> bool:
        while not self._all_sent() and time.monotonic() < deadline:
            if not self._round() and give_up_when_down:
                return False
            if not self._all_sent():
                time.sleep(min(0.2, max(0.0, self._retry_at - time.monotonic())))
        return self._all_sent()

    def _all_sent(self) -> bool:
        """Nothing waits: every open run is acknowledged, every ended one deleted."""
        with self._lock:
            return not any(s.pending or s.ended for s in self._spools.values())

    def shutdown(self) -> None:
        """At exit: give the server ``exit_timeout`` to take what waits, then stop. What it
        did not take stays in the spool for the next start or ``replaybook-sdk flush``."""
        try:
            self.drain(self.config.exit_timeout, give_up_when_down=True)
        except Exception as exc:
            log.warning("replaybook: flush at exit failed: %s", exc)
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            for spool in self._spools.values():
                spool.close(delete=False)
        if self._client is not None:
            self._client.close()

    def shutdown_quietly(self) -> None:
        """Stop without waiting for the server (what is left stays spooled)."""
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.http_timeout + 2)
        with self._lock:
            for spool in self._spools.values():
                spool.close(delete=False)
        if self._client is not None:
            self._client.close()

    def release(self, spool: RunSpool) -> None:
        """The run is over here: forget it once the server holds it all."""
        with self._lock:
            if not spool.pending:
                self._spools.pop(spool.run_id, None)
                spool.close(delete=True)

    # -- the thread -------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop = False
            self._thread = threading.Thread(
                target=self._loop, name="replaybook-sender", daemon=True
            )
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop:
            wait = self.config.flush_interval
            if self._retry_at:
                wait = max(0.0, self._retry_at - time.monotonic())
            self._wake.wait(wait)
            self._wake.clear()
            if self._stop:
                break
            if self._retry_at and time.monotonic() < self._retry_at:
                continue
            self._attempt()
            with self._idle:
                self._idle.notify_all()

    def _attempt(self) -> None:
        """One round; an unexpected failure backs off as an unavailable server does. (It
        used to retry at once when a pause had already run out: a failure that repeats
        spun the thread on a core and logged millions of lines, seen with a spool directory
        removed under a run.)"""
        try:
            self._round()
        except Exception as exc:
            self._back_off()
            log.warning("replaybook: sender error: %s; retry in %.1fs", exc, self._backoff)

    def _back_off(self) -> None:
        self._backoff = min(self.config.max_backoff, max(0.5, self._backoff * 2))
        self._retry_at = time.monotonic() + self._backoff

    def _round(self) -> bool:
        """One pass over the spools; False when the server was unavailable."""
        if not self.config.url:
            if not self._warned_no_url:
                self._warned_no_url = True
                log.warning(
                    "replaybook: no REPLAYBOOK_URL configured: runs are only spooled in %s "
                    "(send them with `replaybook-sdk flush`)",
                    self.config.spool_dir,
                )
            return False
        if self._blocked:
            return False
        with self._lock:
            spools = list(self._spools.values())
        for spool in spools:
            try:
                self._send(spool)
            except Unavailable as exc:
                self._back_off()
                log.info("replaybook: server unavailable (%s); retry in %.1fs", exc, self._backoff)
                return False
            except Refused as exc:
                target = spool.set_aside()
                self._forget(spool)
                self._error(f"run {spool.run_id!r} refused by the server: {exc}; kept in {target}")
            except Blocked as exc:
                self._blocked = str(exc)
                self._error(f"the server refused the token: {exc}")
                return False
            except FileNotFoundError as exc:  # its file removed under it: nothing to retry
                self._forget(spool)
                if spool.closed:  # released (all sent) while this round looked at it
                    continue
                self._error(
                    f"run {spool.run_id!r}: its spool file is gone ({exc}); "
                    f"what was not sent yet is lost"
                )
                continue
            if spool.ended and not spool.pending:
                self._forget(spool)
                spool.close(delete=True)
        self._backoff = 0.0
        self._retry_at = 0.0
        return True

    def _forget(self, spool: RunSpool) -> None:
        with self._lock:
            if self._spools.get(spool.run_id) is spool:
                del self._spools[spool.run_id]

    def _error(self, message: str) -> None:
        self.errors.append(message)
        log.error("replaybook: %s", message)

    def _send(self, spool: RunSpool) -> None:
        while spool.pending and not spool.closed:
            items = spool.read(self.config.max_batch_events, self.config.max_batch_bytes)
            if not items:
                return
            if items[0].kind == "h":
                self._post("/api/runs", items[0].body)
                spool.acknowledge(items[0].end)
                continue
            events: list[Item] = []
            for item in items:
                if item.kind != "e":
                    break
                events.append(item)
            body = b'{"events":[' + b",".join(item.body for item in events) + b"]}"
            self._post(f"/api/runs/{spool.run_id}/events", body)
            spool.acknowledge(events[-1].end)
            self.sent_events += len(events)

    def _post(self, path: str, body: bytes) -> None:
        client = self._http()
        try:
            response = client.post(path, content=body, headers={"content-type": "application/json"})
        except httpx.HTTPError as exc:
            raise Unavailable(f"{type(exc).__name__}: {exc}") from exc
        code = response.status_code
        if code < 300:
            return
        detail = response.text[:500]
        if code >= 500 or code in (408, 425, 429):
            raise Unavailable(f"HTTP {code}: {detail}")
        if code in (401, 403):
            raise Blocked(f"HTTP {code}: {detail}")
        raise Refused(f"HTTP {code}: {detail}")

    def _http(self) -> httpx.Client:
        if self._client is None:
            headers = {"user-agent": "replaybook-sdk"}
            if self.config.token:
                headers["authorization"] = f"Bearer {self.config.token}"
            self._client = httpx.Client(
                base_url=str(self.config.url).rstrip("/"),
                headers=headers,
                timeout=self.config.http_timeout,
            )
        return self._client


_SENDER: Sender | None = None
_SENDER_LOCK = threading.Lock()


def sender(config: Config) -> Sender:
    """The process's sender (created at the first run, with an exit hook that flushes)."""
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = Sender(config)
            atexit.register(_SENDER.shutdown)
            _SENDER.adopt_orphans()  # what an earlier process left behind goes out too
        return _SENDER


def reset_sender(config: Config) -> None:
    """``configure()`` was called: later sends use the new configuration."""
    with _SENDER_LOCK:
        if _SENDER is not None:
            _SENDER.config = config
            if _SENDER._client is not None:
                _SENDER._client.close()
                _SENDER._client = None
            _SENDER._blocked = None
