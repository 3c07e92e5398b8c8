#!/usr/bin/env bash
# Make sure the PostgreSQL the tests use (127.0.0.1:5432, trust auth, database `test`) is up.
# Override with REPLAYBOOK_TEST_PG_URL to point the tests at another server.
set -euo pipefail
host=127.0.0.1 port=5432
if [ -n "${REPLAYBOOK_TEST_PG_URL:-}" ]; then exit 0; fi
if ! pg_isready -q -h "$host" -p "$port" 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
  else
    echo "PostgreSQL is not running on $host:$port and pg_ctlcluster is not available" >&2
    exit 1
  fi
  deadline=$((SECONDS + 60))
  until pg_isready -q -h "$host" -p "$port"; do
    if [ $SECONDS -ge $deadline ]; then echo "PostgreSQL did not start within 60 s" >&2; exit 1; fi
    sleep 0.5
  done
fi
# the database `test` must exist
if ! psql -h "$host" -p "$port" -U postgres -d test -Atc 'select 1' >/dev/null 2>&1; then
  psql -h "$host" -p "$port" -U postgres -d postgres -c 'CREATE DATABASE test' >/dev/null
fi
