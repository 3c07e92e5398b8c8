"""Incidents, evidence freezes and regression cases in SQL (tables of migration 0002).

Writes that a Temporal activity may retry are idempotent: saving an incident again updates it,
recording the same freeze again or putting the same case again changes nothing. A write that
contradicts what is recorded (another source run for an incident, another run or chain head for
a freeze id, other content for a case id) is refused with ``ConflictError``, and nothing
recorded is changed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import JsonValue
from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from models.enums import AgentFailureType
from models.errors import ConflictError, InvalidInputError, NotFoundError
from models.freeze import FreezeRecord
from models.governance import GovernanceKind, GovernanceRecord
from models.incident import StoredIncident
from models.regression import RegressionCase, RegressionCaseStatus, retire_case
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.governance import append_governance

__all__ = ["SqlIncidentStore"]

#: fields a retried freeze may differ in: the attempt's own time, the release, and a retention
#: computed from that time (it extends the freeze)
_FREEZE_VOLATILE = {"created_at", "released_at", "retention_until"}


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _instant(value: datetime, what: str) -> datetime:
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise InvalidInputError(f"{what} must be a timezone-aware datetime, got {value!r}")
    # SQLite keeps the wall time it is given: always store UTC
    return value.astimezone(UTC)


def _insert_if_absent(conn: AsyncConnection, table: Table, key_column: str) -> Any:
    insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    return insert(table).on_conflict_do_nothing(index_elements=[key_column])


class SqlIncidentStore:
    """Incidents, their evidence freezes and the regression cases they produced.

    ``clock`` stamps incident ``created_at``/``updated_at`` when the caller gives no time.
    """

    def __init__(self, db: Database, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.db = db
        self.clock = clock

    async def _locked_row(self, conn: AsyncConnection, table: Table, where: Any) -> Any:
        query = select(table).where(where)
        if self.db.is_postgresql:
            query = query.with_for_update()
        return (await conn.execute(query)).first()

    # incidents ------------------------------------------------------------------------------

    async def save_incident(
        self,
        incident_id: str,
        source_run_id: str,
        failure_type: AgentFailureType | str | None,
        signature: str | None,
        signature_key: str | None,
        phase: str,
        record: dict[str, JsonValue],
        *,
        at: datetime | None = None,
    ) -> StoredIncident:
        """Insert or update an incident; ``updated_at`` is ``at`` (default: the clock).

        ``failure_type``, ``signature`` and ``signature_key`` are None until the incident is
        signed. The source run of an incident never changes (``ConflictError``)."""
        if not incident_id or not phase or not source_run_id:
            raise InvalidInputError(
                "an incident needs an incident_id, a source_run_id and a phase "
                f"(got {incident_id!r}, {source_run_id!r}, {phase!r})"
            )
        if failure_type is not None:
            try:
                failure_type = AgentFailureType(failure_type)
            except ValueError:
                known = ", ".join(t.value for t in AgentFailureType)
                raise InvalidInputError(
                    f"incident {incident_id}: unknown failure type {failure_type!r} "
                    f"(known: {known})"
                ) from None
        now = _instant(at if at is not None else self.clock(), "the incident's time")
        row = {
            "incident_id": incident_id,
            "source_run_id": source_run_id,
            "failure_type": str(failure_type) if failure_type is not None else None,
            "signature": signature,
            "signature_key": signature_key,
            "phase": phase,
            "updated_at": now,
            "record": record,
        }
        table = schema.incidents
        async with self.db.transaction() as conn:
            await self._require_run(conn, source_run_id, f"incident {incident_id}")
            inserted = await conn.execute(
                _insert_if_absent(conn, table, "incident_id").values({**row, "created_at": now})
            )
            if inserted.rowcount != 1:
                existing = await self._locked_row(conn, table, table.c.incident_id == incident_id)
                if existing.source_run_id != source_run_id:
                    raise ConflictError(
                        f"incident {incident_id} is recorded for run {existing.source_run_id!r}, "
                        f"not {source_run_id!r}"
                    )
                await conn.execute(
                    update(table).where(table.c.incident_id == incident_id).values(row)
                )
            stored = (
                await conn.execute(select(table).where(table.c.incident_id == incident_id))
            ).one()
        return _incident(stored)

    async def _require_run(self, conn: AsyncConnection, run_id: str, what: str) -> None:
        runs = schema.runs
        found = (await conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id))).first()
        if found is None:
            raise NotFoundError(f"{what}: run {run_id!r} is not recorded")

    async def get_incident(self, incident_id: str) -> StoredIncident:
        table = schema.incidents
        async with self.db.read() as conn:
            row = (
                await conn.execute(select(table).where(table.c.incident_id == incident_id))
            ).first()
        if row is None:
            raise NotFoundError(f"incident {incident_id!r} is not recorded")
        return _incident(row)

    async def list_incidents(
        self,
        *,
        signature: str | None = None,
        source_run_id: str | None = None,
        limit: int = 1000,
    ) -> list[StoredIncident]:
        """Incidents, newest first."""
        c = schema.incidents.c
        query = select(schema.incidents).order_by(c.created_at.desc(), c.incident_id).limit(limit)
        if signature is not None:
            query = query.where(c.signature == signature)
        if source_run_id is not None:
            query = query.where(c.source_run_id == source_run_id)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [_incident(row) for row in rows]

    async def signature_groups(self) -> list[dict[str, Any]]:
        """Signed incidents grouped by signature: ``signature``, ``failure_type`` (the type a
        human confirmed last in the group, else the automatic one), ``automatic_failure_type``,
        ``confirmed_failure_types`` (per type, how many incidents a human confirmed with it),
        ``count`` and ``incident_ids`` (oldest first); the largest group first, ties by
        signature."""
        c = schema.incidents.c
        query = (
            select(c.incident_id, c.signature, c.failure_type, c.record)
            .where(c.signature.is_not(None))
            .order_by(c.created_at, c.incident_id)
        )
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        groups: dict[str, dict[str, Any]] = {}
        for row in rows:
            automatic, confirmed = _failure_types(row.record, row.failure_type)
            group = groups.setdefault(
                row.signature,
                {
                    "signature": row.signature,
                    "failure_type": automatic,
                    "automatic_failure_type": automatic,
                    "confirmed_failure_types": {},
                    "count": 0,
                    "incident_ids": [],
                },
            )
            if confirmed is not None:  # a human's word wins over the classifier's
                group["failure_type"] = confirmed
                counts = group["confirmed_failure_types"]
                counts[confirmed] = counts.get(confirmed, 0) + 1
            group["count"] += 1
            group["incident_ids"].append(row.incident_id)
        return sorted(groups.values(), key=lambda g: (-g["count"], g["signature"]))

    # evidence freezes -----------------------------------------------------------------------

    async def record_freeze(self, freeze: FreezeRecord) -> FreezeRecord:
        """Record a freeze; returns what is stored.

        The same freeze again (a retried activity, even at another time) changes nothing, except
        that a later ``retention_until`` extends an unreleased freeze, as it extends the
        artifacts' retention (retention is only ever extended). Another run, incident, chain
        head or artifact set under the same id is refused with ``ConflictError``."""
        table = schema.evidence_freezes
        row = _freeze_row(freeze)
        async with self.db.transaction() as conn:
            await self._require_run(conn, freeze.run_id, f"freeze {freeze.freeze_id}")
            inserted = await conn.execute(_insert_if_absent(conn, table, "freeze_id").values(row))
            if inserted.rowcount == 1:
                # chained: a freeze deleted in SQL still holds (``models.governance``)
                await append_governance(
                    conn,
                    [
                        _freeze_entry(
                            GovernanceKind.FREEZE_PLACED,
                            freeze,
                            freeze.created_at,
                            "incident " + freeze.incident_id,
                            "",
                        )
                    ],
                )
                return freeze
            existing = await self._locked_row(conn, table, table.c.freeze_id == freeze.freeze_id)
            stored = FreezeRecord.model_validate(existing.record)
            ours, theirs = _freeze_identity(freeze), _freeze_identity(stored)
            if ours != theirs:
                differs = ", ".join(sorted(k for k, v in ours.items() if theirs.get(k) != v))
                raise ConflictError(
                    f"freeze {freeze.freeze_id} is already recorded with other {differs}"
                )
            if stored.released_at is not None or freeze.retention_until <= stored.retention_until:
                return stored
            extended = stored.model_copy(update={"retention_until": freeze.retention_until})
            await conn.execute(
                update(table)
                .where(table.c.freeze_id == freeze.freeze_id)
                .values(
                    retention_until=extended.retention_until,
                    record=extended.model_dump(mode="json"),
                )
            )
        return extended

    async def get_freeze(self, freeze_id: str) -> FreezeRecord:
        table = schema.evidence_freezes
        async with self.db.read() as conn:
            row = (
                await conn.execute(select(table.c.record).where(table.c.freeze_id == freeze_id))
            ).first()
        if row is None:
            raise NotFoundError(f"freeze {freeze_id!r} is not recorded")
        return FreezeRecord.model_validate(row.record)

    async def freezes_for_run(self, run_id: str) -> list[FreezeRecord]:
        """Every freeze of the run, released ones included, oldest first."""
        c = schema.evidence_freezes.c
        query = select(c.record).where(c.run_id == run_id).order_by(c.created_at, c.freeze_id)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [FreezeRecord.model_validate(row.record) for row in rows]

    async def frozen_until(self, run_id: str, *, at: datetime | None = None) -> datetime | None:
        """The latest ``retention_until`` of the run's unreleased freezes; None when there is
        none. With ``at``, only freezes still in force at that instant count."""
        c = schema.evidence_freezes.c
        query = select(func.max(c.retention_until)).where(
            c.run_id == run_id, c.released_at.is_(None)
        )
        if at is not None:
            query = query.where(c.retention_until > _instant(at, "at"))
        async with self.db.read() as conn:
            until = (await conn.execute(query)).scalar_one_or_none()
        return utc(until) if until is not None else None

    async def release_freeze(
        self, freeze_id: str, at: datetime, *, by: str = "replaybook", reason: str = ""
    ) -> FreezeRecord:
        """Mark a freeze released at ``at``; releasing it again keeps the first release time.
        The artifacts' legal holds and retention are the store's and are not touched here.
        The release is chained (``by``, ``reason``): without it a freeze never lifts."""
        at = _instant(at, "the release time")
        table = schema.evidence_freezes
        async with self.db.transaction() as conn:
            row = await self._locked_row(conn, table, table.c.freeze_id == freeze_id)
            if row is None:
                raise NotFoundError(f"freeze {freeze_id!r} is not recorded")
            stored = FreezeRecord.model_validate(row.record)
            if stored.released_at is not None:
                return stored
            released = stored.model_copy(update={"released_at": at})
            await conn.execute(
                update(table)
                .where(table.c.freeze_id == freeze_id)
                .values(released_at=at, record=released.model_dump(mode="json"))
            )
            await append_governance(
                conn, [_freeze_entry(GovernanceKind.FREEZE_RELEASED, stored, at, by, reason)]
            )
        return released

    # regression cases -----------------------------------------------------------------------

    async def put_case(self, case: RegressionCase) -> RegressionCase:
        """Store a regression case; the same case again changes nothing, another case under
        the same id is refused (retire it and create a new one)."""
        table = schema.regression_cases
        body = case.model_dump(mode="json")
        async with self.db.transaction() as conn:
            inserted = await conn.execute(
                _insert_if_absent(conn, table, "case_id").values(_case_row(case, body))
            )
            if inserted.rowcount == 1:
                return case
            existing = (
                await conn.execute(select(table.c.record).where(table.c.case_id == case.case_id))
            ).one()
        stored = RegressionCase.model_validate(existing.record)
        if stored != case:
            raise ConflictError(
                f"regression case {case.case_id} is already stored with other content "
                f"(status {stored.status.value}); retire it and create a new case"
            )
        return stored

    async def get_case(self, case_id: str) -> RegressionCase:
        table = schema.regression_cases
        async with self.db.read() as conn:
            row = (
                await conn.execute(select(table.c.record).where(table.c.case_id == case_id))
            ).first()
        if row is None:
            raise NotFoundError(f"regression case {case_id!r} is not recorded")
        return RegressionCase.model_validate(row.record)

    async def list_cases(
        self, *, status: RegressionCaseStatus | None = None, incident_id: str | None = None
    ) -> list[RegressionCase]:
        """Regression cases, oldest first."""
        c = schema.regression_cases.c
        query = select(c.record).order_by(c.created_at, c.case_id)
        if status is not None:
            query = query.where(c.status == str(status))
        if incident_id is not None:
            query = query.where(c.incident_id == incident_id)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [RegressionCase.model_validate(row.record) for row in rows]

    async def active_cases(self) -> list[RegressionCase]:
        """The cases that gate a release: every ACTIVE case, oldest first."""
        return await self.list_cases(status=RegressionCaseStatus.ACTIVE)

    async def retire_case(self, case_id: str, reason: str, at: datetime) -> RegressionCase:
        """Retire a case for ``reason`` (non-empty) at ``at``; a case is never deleted.
        ``NotFoundError`` for an unknown id, ``ConflictError`` for a case already retired."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInputError(f"retiring regression case {case_id} needs a reason")
        at = _instant(at, "the retirement time")
        table = schema.regression_cases
        async with self.db.transaction() as conn:
            row = await self._locked_row(conn, table, table.c.case_id == case_id)
            if row is None:
                raise NotFoundError(f"regression case {case_id!r} is not recorded")
            retired = retire_case(RegressionCase.model_validate(row.record), reason, at)
            body = retired.model_dump(mode="json")
            await conn.execute(
                update(table).where(table.c.case_id == case_id).values(_case_row(retired, body))
            )
        return retired


def _incident(row: Any) -> StoredIncident:
    return StoredIncident(
        incident_id=row.incident_id,
        source_run_id=row.source_run_id,
        failure_type=row.failure_type,
        signature=row.signature,
        signature_key=row.signature_key,
        phase=row.phase,
        created_at=utc(row.created_at),
        updated_at=utc(row.updated_at),
        record=row.record,
    )


def _freeze_identity(freeze: FreezeRecord) -> dict[str, Any]:
    return {k: v for k, v in freeze.model_dump(mode="json").items() if k not in _FREEZE_VOLATILE}


def _freeze_row(freeze: FreezeRecord) -> dict[str, Any]:
    return {
        "freeze_id": freeze.freeze_id,
        "incident_id": freeze.incident_id,
        "run_id": freeze.run_id,
        "chain_head_sequence": freeze.chain_head_sequence,
        "chain_head_hash": freeze.chain_head_hash,
        "retention_until": freeze.retention_until,
        "types": [str(t) for t in freeze.types],
        "artifact_count": freeze.artifact_count,
        "enforced_by_backend": freeze.enforced_by_backend,
        "created_at": freeze.created_at,
        "released_at": freeze.released_at,
        "record": freeze.model_dump(mode="json"),
    }


def _case_row(case: RegressionCase, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "case_id": case.case_id,
        "incident_id": case.incident_id,
        "source_run_id": case.source_run_id,
        "status": str(case.status),
        "created_at": case.created_at,
        "retired_at": case.retired_at,
        "retired_reason": case.retired_reason,
        "record": body,
    }


def _failure_types(record: Any, stored: str | None) -> tuple[str | None, str | None]:
    """The automatic failure type of an incident's saved view and the one a human confirmed
    (None: not confirmed with a type); a row without a view has only the stored type."""
    view = record if isinstance(record, dict) else {}
    signature = view.get("signature")
    confirmation = view.get("confirmation")
    automatic = signature.get("failure_type") if isinstance(signature, dict) else stored
    confirmed = confirmation.get("failure_type") if isinstance(confirmation, dict) else None
    return automatic, confirmed


def _freeze_entry(
    kind: GovernanceKind, freeze: FreezeRecord, at: datetime, by: str, reason: str
) -> GovernanceRecord:
    return GovernanceRecord(
        kind=kind,
        run_id=freeze.run_id,
        at=at,
        actor=by,
        reason=reason,
        hold_id=freeze.freeze_id,
        incident_id=freeze.incident_id,
    )
