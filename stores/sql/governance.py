"""The governance log in SQL (``models.governance``): subject registrations, legal holds and
freezes, placed and released, as one hash chain; appended in the transaction that writes the
SQL row it vouches for, its head anchored outside the database after a hold or freeze entry."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import func, insert, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from models.anchor import Anchor, check_head
from models.chain import VerificationProblem
from models.governance import (
    GOVERNANCE_GENESIS,
    GOVERNANCE_LOG_ID,
    GovernanceKind,
    GovernanceRecord,
    describe,
    governance_link,
    row_problems,
    standing,
    verify_governance_chain,
)
from models.privacy import LegalHold
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.database import Database

__all__ = [
    "GOVERNANCE_LOCK",
    "GovernanceRows",
    "SqlGovernanceLog",
    "append_governance",
    "governance_log_rows",
    "governance_rows",
    "hold_entry",
    "hold_releases",
]

#: the advisory lock that serialises governance appends on PostgreSQL
_LOCK = 0x52425F474F564C47  # "RB_GOVLG"
#: the same lock, for the ledger's batch writer (it registers a run's data subjects)
GOVERNANCE_LOCK = _LOCK
#: the entries whose head is anchored at once (a subject registration rides on the next one)
_ANCHORED = frozenset(
    {
        GovernanceKind.HOLD_PLACED,
        GovernanceKind.HOLD_RELEASED,
        GovernanceKind.FREEZE_PLACED,
        GovernanceKind.FREEZE_RELEASED,
    }
)


async def append_governance(
    conn: AsyncConnection, records: Sequence[GovernanceRecord]
) -> tuple[int, str] | None:
    """Append ``records`` in the caller's transaction (one writer at a time: SQLite's write
    lock, a transaction-scoped advisory lock on PostgreSQL); returns the new head."""
    if not records:
        return None
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK})
    g = schema.governance_log.c
    last = (
        await conn.execute(select(g.position, g.hash).order_by(g.position.desc()).limit(1))
    ).first()
    rows = governance_log_rows(None if last is None else (last.position, last.hash), records)
    await conn.execute(insert(schema.governance_log), rows)
    return rows[-1]["position"], rows[-1]["hash"]


def governance_log_rows(
    head: tuple[int, str] | None, records: Sequence[GovernanceRecord]
) -> list[dict[str, Any]]:
    """The ``governance_log`` rows of ``records`` chained after ``head`` (position, hash; None:
    the log is empty), for a writer holding the log's lock (``append_governance``, the
    ledger's batch writer)."""
    position, previous = (0, GOVERNANCE_GENESIS) if head is None else head
    rows = []
    for record in records:
        body = record.model_dump(mode="json")
        position += 1
        link = governance_link(previous, position, body)
        rows.append(
            {
                "position": position,
                "run_id": record.run_id,
                "kind": str(record.kind),
                "subject_id": record.subject_id,
                "at": record.at,
                "record": body,
                "previous_hash": previous,
                "hash": link,
            }
        )
        previous = link
    return rows


class SqlGovernanceLog:
    def __init__(self, db: Database, anchors: AnchorLog | None = None) -> None:
        self.db = db
        #: where the log's head is anchored after a hold or freeze entry (None: not anchored)
        self.anchors = anchors

    async def anchor(
        self, head: tuple[int, str] | None, records: Sequence[GovernanceRecord]
    ) -> None:
        """Anchor ``head`` (the log's, after ``records`` were committed) when one of them
        places or releases a hold or freeze."""
        if (
            head is None
            or self.anchors is None
            or not _ANCHORED.intersection(r.kind for r in records)
        ):
            return
        await self.anchors.append(
            Anchor(
                kind="governance",
                run_id=GOVERNANCE_LOG_ID,
                sequence=head[0],
                head=head[1],
                at=records[-1].at,
            )
        )

    async def anchor_current(self, at: datetime) -> None:
        """Anchor the log's current head (after entries another store appended)."""
        g = schema.governance_log.c
        async with self.db.read() as conn:
            last = (
                await conn.execute(select(g.position, g.hash).order_by(g.position.desc()).limit(1))
            ).first()
        if last is not None and self.anchors is not None:
            await self.anchors.append(
                Anchor(
                    kind="governance",
                    run_id=GOVERNANCE_LOG_ID,
                    sequence=last.position,
                    head=last.hash,
                    at=at,
                )
            )

    async def entries(self, run_id: str) -> list[GovernanceRecord]:
        g = schema.governance_log.c
        async with self.db.read() as conn:
            if not await _has_log(conn):
                return []
            rows = (
                await conn.execute(select(g.record).where(g.run_id == run_id).order_by(g.position))
            ).all()
        return [GovernanceRecord.model_validate(row.record) for row in rows]

    async def runs_of_subject(self, subject_id: str) -> list[str]:
        """The runs the log registered ``subject_id`` for (whatever ``run_subjects`` says)."""
        g = schema.governance_log.c
        async with self.db.read() as conn:
            if not await _has_log(conn):
                return []
            rows = (
                await conn.execute(
                    select(g.run_id)
                    .where(
                        g.subject_id == subject_id,
                        g.kind == str(GovernanceKind.SUBJECT_REGISTERED),
                    )
                    .distinct()
                )
            ).all()
        return sorted(row.run_id for row in rows)

    async def verify(self) -> list[VerificationProblem]:
        """The whole log's chain, then its head against its latest anchor."""
        g = schema.governance_log.c
        async with self.db.read() as conn:
            if not await _has_log(conn):
                return []
            rows = (
                await conn.execute(
                    select(g.position, g.previous_hash, g.hash, g.record).order_by(g.position)
                )
            ).all()
        problems = verify_governance_chain(
            (r.position, r.previous_hash, r.hash, dict(r.record)) for r in rows
        )
        entry = None if self.anchors is None else await self.anchors.latest(GOVERNANCE_LOG_ID)
        if entry is not None:
            problem = check_head(
                entry.anchor, [r.hash for r in rows], what="governance log: anchor"
            )
            if problem is not None:
                problems.append(problem)
        return problems

    async def standing_reasons(self, run_id: str, now: datetime) -> list[str]:
        """The holds and freezes of ``run_id`` the log says stand at ``now``, as reasons."""
        return [describe(e) for e in standing(await self.entries(run_id), now).values()]

    async def held_reasons(self, run_id: str, now: datetime) -> list[str]:
        """Why the log says ``run_id`` is held at ``now``, whatever the SQL rows say; and,
        when the log does not verify (an entry deleted or rewritten, its head not the
        anchored one), that: no run can then be known unheld."""
        problems = await self.verify()
        reasons = [f"the governance log does not verify ({p.message})" for p in problems[:1]]
        return reasons + await self.standing_reasons(run_id, now)

    async def release_orphaned_freezes(
        self, run_id: str, incident_id: str, at: datetime, by: str, reason: str
    ) -> list[str]:
        """Release the freezes of ``incident_id`` on ``run_id`` the log says stand though their
        row is gone (deleted in SQL): from the chained record, so they can lift at all."""
        f = schema.evidence_freezes.c
        async with self.db.read() as conn:
            rows = set(
                (await conn.execute(select(f.freeze_id).where(f.run_id == run_id))).scalars()
            )
        entries = [
            e.model_copy(
                update={
                    "kind": GovernanceKind.FREEZE_RELEASED,
                    "at": at,
                    "actor": by,
                    "reason": reason,
                }
            )
            for e in standing(await self.entries(run_id), at).values()
            if e.kind is GovernanceKind.FREEZE_PLACED
            and e.incident_id == incident_id
            and e.hold_id not in rows
        ]
        async with self.db.transaction() as conn:
            head = await append_governance(conn, entries)
        await self.anchor(head, entries)
        return sorted(str(e.hold_id) for e in entries)


def hold_entry(
    hold: LegalHold, *, placed: bool, at: datetime, by: str, reason: str = ""
) -> GovernanceRecord:
    """The entry that places (``placed``) or releases ``hold``."""
    return GovernanceRecord(
        kind=GovernanceKind.HOLD_PLACED if placed else GovernanceKind.HOLD_RELEASED,
        run_id=hold.run_id,
        at=at,
        actor=by,
        reason=hold.reason if placed else reason,
        hold_id=hold.hold_id,
        until=hold.until if placed else None,
    )


async def hold_releases(
    db: Database,
    run_id: str,
    released: Sequence[LegalHold],
    at: datetime,
    by: str,
    reason: str,
) -> list[GovernanceRecord]:
    """The entries releasing ``released`` (their rows) and every other hold of ``run_id`` the
    log says stands (its row deleted in SQL: released from the chained record, so it can lift
    at all)."""
    entries = [hold_entry(h, placed=False, at=at, by=by, reason=reason) for h in released]
    listed = {h.hold_id for h in released}
    for entry in standing(await SqlGovernanceLog(db).entries(run_id), at).values():
        if entry.kind is GovernanceKind.HOLD_PLACED and entry.hold_id not in listed:
            entries.append(
                entry.model_copy(
                    update={
                        "kind": GovernanceKind.HOLD_RELEASED,
                        "at": at,
                        "actor": by,
                        "reason": reason,
                        "until": None,
                    }
                )
            )
    return entries


async def _has_log(conn: AsyncConnection) -> bool:
    return bool(await conn.run_sync(lambda c: inspect(c).has_table("governance_log")))


class GovernanceRows(NamedTuple):
    """What ``runs verify`` reads of a run's governance: its log entries (position, record),
    the links problems of those entries, and its SQL rows."""

    entries: list[tuple[int, GovernanceRecord]]
    links: list[VerificationProblem]
    subjects: list[str]
    holds: dict[str, bool]
    freezes: dict[str, bool]

    def problems(self) -> list[VerificationProblem]:
        return [
            *self.links,
            *row_problems(self.entries, self.subjects, self.holds, self.freezes, datetime.now(UTC)),
        ]


async def governance_rows(conn: AsyncConnection, run_id: str) -> GovernanceRows | None:
    """The run's governance entries, checked link by link (each against the entry before it,
    and the log for missing positions), and its subject, hold and freeze rows, on ``conn``'s
    snapshot; None before migration 0007."""
    if not await _has_log(conn):
        return None
    g = schema.governance_log.c
    mine = (
        await conn.execute(
            select(g.position, g.previous_hash, g.hash, g.record)
            .where(g.run_id == run_id)
            .order_by(g.position)
        )
    ).all()
    before = {p.position - 1 for p in mine} - {0}
    hashes = {
        r.position: r.hash
        for r in (
            await conn.execute(select(g.position, g.hash).where(g.position.in_(before)))
        ).all()
    }
    links: list[VerificationProblem] = []
    for row in mine:
        previous = GOVERNANCE_GENESIS if row.position == 1 else hashes.get(row.position - 1)
        if previous is None:
            message = f"governance log entry {row.position - 1} is missing (deleted)"
        elif row.previous_hash != previous:
            message = f"governance log entry {row.position} does not link to the entry before it"
        elif governance_link(row.previous_hash, row.position, dict(row.record)) != row.hash:
            message = f"governance log entry {row.position} was rewritten"
        else:
            continue
        links.append(VerificationProblem(sequence=None, kind="governance", message=message))
    count, last = (await conn.execute(select(func.count(), func.max(g.position)))).one()
    if count != (last or 0):
        links.append(
            VerificationProblem(
                sequence=None,
                kind="governance",
                message=f"governance log has {count} entries up to position {last}: entries "
                "were deleted",
            )
        )
    s, h, f = schema.run_subjects.c, schema.legal_holds.c, schema.evidence_freezes.c
    subjects = (await conn.execute(select(s.subject_id).where(s.run_id == run_id))).scalars()
    holds = (await conn.execute(select(h.hold_id, h.released_at).where(h.run_id == run_id))).all()
    freezes = (
        await conn.execute(select(f.freeze_id, f.released_at).where(f.run_id == run_id))
    ).all()
    entries = [(r.position, GovernanceRecord.model_validate(dict(r.record))) for r in mine]
    return GovernanceRows(
        entries,
        links,
        list(subjects),
        {r.hold_id: r.released_at is not None for r in holds},
        {r.freeze_id: r.released_at is not None for r in freezes},
    )
