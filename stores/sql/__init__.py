"""SQL persistence (SQLAlchemy 2 async): PostgreSQL through asyncpg, SQLite through aiosqlite."""
