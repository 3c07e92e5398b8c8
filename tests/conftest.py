"""Shared fixtures. Real services only: PostgreSQL on 127.0.0.1:5432, SeaweedFS started here."""

pytest_plugins = ["tests.fixtures_db", "tests.fixtures_s3"]
