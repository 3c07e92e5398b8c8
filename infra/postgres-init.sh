#!/bin/sh
# Runs once, when the PostgreSQL volume is first initialised: Replaybook's own role and
# database next to Temporal's (Temporal's auto-setup creates `temporal` and
# `temporal_visibility`). Replaybook migrates its schema itself when a process starts.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres <<SQL
CREATE ROLE replaybook LOGIN PASSWORD '${REPLAYBOOK_DB_PASSWORD}';
CREATE DATABASE replaybook OWNER replaybook;
SQL
