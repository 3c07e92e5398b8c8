"""Reading evidence records back from their lookup tables."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from models import HashedRecord
from models.errors import NotFoundError
from stores.sql.database import Database
from stores.sql.projections import PROJECTIONS, Projection


def _projection(record_type: type[HashedRecord]) -> Projection:
    try:
        return PROJECTIONS[record_type]
    except KeyError:
        raise NotFoundError(f"{record_type.__name__} records are not stored in a table") from None


class SqlEvidenceReader:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def records(self, record_type: type[HashedRecord], run_id: str) -> list[Any]:
        table = _projection(record_type).table
        query = select(table.c.record).where(table.c.run_id == run_id).order_by(table.c.sequence)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [record_type.model_validate(row.record) for row in rows]

    async def record(self, record_type: type[HashedRecord], key: str) -> Any:
        projection = _projection(record_type)
        table = projection.table
        query = select(table.c.record).where(table.c[projection.key_column] == key)
        async with self.db.read() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            raise NotFoundError(f"{record_type.__name__} {key!r} is not recorded")
        return record_type.model_validate(row.record)
