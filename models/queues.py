"""Temporal task queue names (persisted in histories: never rename)."""

CONTROL_QUEUE = "replaybook-control"
#: replay steps only: served by an isolated worker pool that holds no production credential
REPLAY_QUEUE = "replaybook-replay"
