"""Throw-away PostgreSQL databases for tests and benchmarks (never used by the product)."""

from __future__ import annotations

import uuid

import asyncpg


async def create_scratch_database(admin_url: str, prefix: str) -> str:
    """Create an empty database next to ``admin_url``'s and return its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    return f"{admin_url.rsplit('/', 1)[0]}/{name}"


async def drop_scratch_database(admin_url: str, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()
