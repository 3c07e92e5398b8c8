"""Read-side queries of the raw-evidence vault: each run's data subjects, which runs a subject
is in, what was destroyed, which runs' raw content has outlived its retention, and the
encrypted objects a run holds. Mixed into ``stores.sql.privacy.SqlRawVault``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from models.governance import GovernanceKind, GovernanceRecord
from models.privacy import RunSubject, SubjectKind
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.governance import SqlGovernanceLog, append_governance

#: a raw ciphertext kept in the artifact store is referenced as ``cas:<digest>``
CAS_PREFIX = "cas:"


def learned_subject_rows(run_id: str, subjects: Sequence[RunSubject]) -> list[dict[str, Any]]:
    """The ``run_subjects`` rows of people a run learned of (``add_subjects`` of PERSON
    subjects: never primary, inserted unless the run has them already)."""
    assert all(s.kind is SubjectKind.PERSON for s in subjects)
    return [
        {
            "run_id": run_id,
            "subject_id": s.subject_id,
            "kind": str(s.kind),
            "source": s.source,
            "is_primary": False,
        }
        for s in subjects
    ]


def subject_entries(rows: Sequence[dict[str, Any]], at: datetime) -> list[GovernanceRecord]:
    """The governance entries registering new ``run_subjects`` rows: a row deleted later
    disagrees with its entry, and a deletion of the subject still finds the run."""
    return [
        GovernanceRecord(
            kind=GovernanceKind.SUBJECT_REGISTERED,
            run_id=row["run_id"],
            at=at,
            actor="recorder",
            subject_id=row["subject_id"],
            subject_kind=row["kind"],
            source=row["source"],
            primary=row["is_primary"],
        )
        for row in rows
    ]


async def insert_subjects_if_absent(
    conn: AsyncConnection, rows: Sequence[dict[str, Any]], at: datetime | None = None
) -> None:
    s = schema.run_subjects.c
    known = {
        (row.run_id, row.subject_id)
        for row in (
            await conn.execute(
                select(s.run_id, s.subject_id).where(s.run_id.in_({r["run_id"] for r in rows}))
            )
        ).all()
    }
    missing: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        if (row["run_id"], row["subject_id"]) not in known:
            missing.setdefault((row["run_id"], row["subject_id"]), row)
    if missing:
        await conn.execute(insert(schema.run_subjects), list(missing.values()))
        await append_governance(
            conn, subject_entries(list(missing.values()), at or datetime.now(UTC))
        )


async def add_run_subjects(
    conn: AsyncConnection, run_id: str, subjects: Sequence[RunSubject]
) -> None:
    """Register ``subjects`` as ``run_id``'s in the caller's transaction (those not there yet)
    with their governance entries: ``add_subjects``, and a run's start, which writes them in
    its own transaction (one commit for the run, its data key and its subjects)."""
    s = schema.run_subjects.c
    known = {
        row.subject_id
        for row in (await conn.execute(select(s.subject_id).where(s.run_id == run_id))).all()
    }
    rows = [
        {
            "run_id": run_id,
            "subject_id": subject.subject_id,
            "kind": str(subject.kind),
            "source": subject.source,
            # raw is sealed under the declared end user (or tenant), never under a person the
            # run only read about
            "is_primary": i == 0 and not known and subject.kind is not SubjectKind.PERSON,
        }
        for i, subject in enumerate(subjects)
        if subject.subject_id not in known
    ]
    if rows:
        await conn.execute(insert(schema.run_subjects), rows)
        await append_governance(conn, subject_entries(rows, datetime.now(UTC)))


class RawVaultQueries:
    db: Database

    async def destroyed_summary(self, run_id: str) -> tuple[int, str | None, datetime | None]:
        """(number of destroyed raw payloads of the run, one request id, its time)."""
        r = schema.raw_payloads.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(r.destroyed_by_request, r.destroyed_at)
                    .where(r.run_id == run_id, r.destroyed_at.is_not(None))
                    .order_by(r.destroyed_at)
                )
            ).all()
        if not rows:
            return 0, None, None
        return len(rows), rows[0].destroyed_by_request, utc(rows[0].destroyed_at)

    # subjects ---------------------------------------------------------------------------------

    async def add_subjects(self, run_id: str, subjects: Sequence[RunSubject]) -> None:
        if not subjects:
            return
        async with self.db.transaction() as conn:
            await add_run_subjects(conn, run_id, subjects)

    async def subjects(self, run_id: str) -> list[dict[str, Any]]:
        s = schema.run_subjects.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(schema.run_subjects)
                    .where(s.run_id == run_id)
                    .order_by(s.is_primary.desc(), s.subject_id)
                )
            ).all()
        return [
            {
                "subject_id": row.subject_id,
                "kind": row.kind,
                "source": row.source,
                "primary": bool(row.is_primary),
            }
            for row in rows
        ]

    async def run_subjects(self, run_id: str) -> list[RunSubject]:
        """The run's subjects as records (a replay's run inherits its source's)."""
        return [
            RunSubject(subject_id=s["subject_id"], kind=SubjectKind(s["kind"]), source=s["source"])
            for s in await self.subjects(run_id)
        ]

    async def runs_of_subject(self, subject_id: str) -> list[str]:
        """Every run about ``subject_id``: its ``run_subjects`` rows, its raw payloads and its
        registrations in the governance log (a row deleted in SQL does not hide a run)."""
        registered = await SqlGovernanceLog(self.db).runs_of_subject(subject_id)
        s, r = schema.run_subjects.c, schema.raw_payloads.c
        async with self.db.read() as conn:
            declared = (
                await conn.execute(select(s.run_id).where(s.subject_id == subject_id))
            ).all()
            sealed = (
                await conn.execute(select(r.run_id).where(r.subject_id == subject_id).distinct())
            ).all()
        return sorted(
            {row.run_id for row in declared} | {row.run_id for row in sealed} | set(registered)
        )

    async def raw_refs(self, run_id: str) -> list[str]:
        """Digests of the run's encrypted raw objects in the artifact store (for holds)."""
        r = schema.raw_payloads.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(r.ciphertext_ref).where(
                        r.run_id == run_id, r.ciphertext_ref.is_not(None)
                    )
                )
            ).all()
        return [row.ciphertext_ref[len(CAS_PREFIX) :] for row in rows]

    async def expired_runs(self, now: datetime) -> list[tuple[str, str, datetime]]:
        """(run id, retention class, created_at) of runs that still hold raw content."""
        r, runs = schema.raw_payloads.c, schema.runs.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(runs.run_id, runs.record, runs.created_at)
                    .where(
                        runs.run_id.in_(
                            select(r.run_id).where(
                                r.destroyed_at.is_(None), r.raw_hash != r.sanitized_hash
                            )
                        )
                    )
                    .order_by(runs.created_at)
                )
            ).all()
        return [
            (row.run_id, str(row.record.get("retention_class", "STANDARD")), utc(row.created_at))
            for row in rows
        ]

    async def related_records(self, run_ids: Sequence[str]) -> tuple[list[str], list[str]]:
        """Incidents and regression cases made from ``run_ids`` (sanitized already)."""
        i, c = schema.incidents.c, schema.regression_cases.c
        async with self.db.read() as conn:
            incidents = (
                await conn.execute(select(i.incident_id).where(i.source_run_id.in_(list(run_ids))))
            ).all()
            cases = (
                await conn.execute(select(c.case_id).where(c.source_run_id.in_(list(run_ids))))
            ).all()
        return sorted(r.incident_id for r in incidents), sorted(r.case_id for r in cases)
