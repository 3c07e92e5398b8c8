"""Shared fixtures. Real services only: PostgreSQL on 127.0.0.1:5432, SeaweedFS and the
Temporal dev server started by the fixtures on free ports."""

pytest_plugins = [
    "tests.fixtures_db",
    "tests.fixtures_s3",
    "tests.fixtures_temporal",
    "tests.fixtures_replay",
]
