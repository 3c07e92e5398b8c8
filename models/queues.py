"""Temporal task queue names (persisted in histories: never rename)."""

CONTROL_QUEUE = "replaybook-control"
#: replay steps only: served by an isolated worker pool that holds no production credential
REPLAY_QUEUE = "replaybook-replay"

#: seconds without a heartbeat after which a long activity's worker counts as dead and the
#: activity is retried elsewhere (the activities heartbeat every 2 s)
HEARTBEAT_TIMEOUT_SECONDS = 15
