"""Privacy records in SQL: the raw-read audit trail, legal holds, deletion receipts."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import insert, select, update

from models.anchor import AUDIT_LOG_ID, Anchor, verify_audit_chain
from models.chain import VerificationProblem
from models.privacy import AuditRecord, DeletionReceipt, LegalHold
from stores.anchors import AnchorLog
from stores.sql import schema
from stores.sql.database import Database, utc
from stores.sql.governance import SqlGovernanceLog, append_governance, hold_entry, hold_releases
from stores.sql.privacy_audit import append_audit


class SqlPrivacyRecords:
    def __init__(self, db: Database, anchors: AnchorLog | None = None) -> None:
        self.db = db
        #: where the audit chain's head is anchored after each record (None: not anchored)
        self.anchors = anchors

    async def audit(self, record: AuditRecord) -> None:
        """Append ``record`` to the audit chain (``append_audit``) and anchor its head."""
        async with self.db.transaction() as conn:
            position, link = await append_audit(conn, record)
        await self.anchor_audit(position, link, record.at)

    async def anchor_audit(self, position: int, link: str, at: datetime) -> None:
        if self.anchors is not None:
            await self.anchors.append(
                Anchor(kind="audit", run_id=AUDIT_LOG_ID, sequence=position, head=link, at=at)
            )

    async def anchor_audit_head(self) -> None:
        """Anchor the audit chain's newest record (after appends made by another store in its
        own transaction: a destruction of raw content)."""
        a = schema.privacy_audit.c
        async with self.db.read() as conn:
            last = (
                await conn.execute(
                    select(a.position, a.hash, a.at)
                    .where(a.position.is_not(None))
                    .order_by(a.position.desc())
                    .limit(1)
                )
            ).first()
        if last is not None:
            await self.anchor_audit(last.position, last.hash, utc(last.at))

    async def verify_audit(self) -> tuple[int, list[str], list[VerificationProblem]]:
        """The audit chain: its length, its hashes in position order, its first problem."""
        a = schema.privacy_audit.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(a.position, a.previous_hash, a.hash, a.record)
                    .where(a.position.is_not(None))
                    .order_by(a.position)
                )
            ).all()
        chain = [(r.position, r.previous_hash, r.hash, dict(r.record)) for r in rows]
        return len(chain), [r.hash for r in rows], verify_audit_chain(chain)

    async def audits(self, *, limit: int = 10000) -> list[AuditRecord]:
        a = schema.privacy_audit.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(select(a.record).order_by(a.at, a.audit_id).limit(limit))
            ).all()
        return [AuditRecord.model_validate(row.record) for row in rows]

    async def place_hold(self, hold: LegalHold) -> None:
        """Record the hold and its chained entry (``models.governance``) in one transaction,
        then anchor the governance log's head: deleting the row lifts nothing."""
        entry = hold_entry(hold, placed=True, at=hold.placed_at, by=hold.placed_by)
        async with self.db.transaction() as conn:
            await conn.execute(
                insert(schema.legal_holds).values(
                    hold_id=hold.hold_id,
                    run_id=hold.run_id,
                    placed_at=hold.placed_at,
                    until=hold.until,
                    released_at=None,
                    record=hold.model_dump(mode="json"),
                )
            )
            head = await append_governance(conn, [entry])
        await SqlGovernanceLog(self.db, self.anchors).anchor(head, [entry])

    async def holds(self, run_id: str | None = None) -> list[LegalHold]:
        h = schema.legal_holds.c
        query = select(h.record).order_by(h.placed_at, h.hold_id)
        if run_id is not None:
            query = query.where(h.run_id == run_id)
        async with self.db.read() as conn:
            rows = (await conn.execute(query)).all()
        return [LegalHold.model_validate(row.record) for row in rows]

    async def release_holds(
        self, run_id: str, at: datetime, *, by: str = "cli", reason: str = ""
    ) -> list[LegalHold]:
        """Release every active hold of ``run_id``; returns the released holds. Each release
        is chained (who, when, why) and the governance log's head anchored: a hold lifts only
        so (one whose row was deleted in SQL is released from its chained record)."""
        released = [
            h.model_copy(update={"released_at": at})
            for h in await self.holds(run_id)
            if h.released_at is None
        ]
        entries = await hold_releases(self.db, run_id, released, at, by, reason)
        async with self.db.transaction() as conn:
            for hold in released:
                await conn.execute(
                    update(schema.legal_holds)
                    .where(schema.legal_holds.c.hold_id == hold.hold_id)
                    .values(released_at=at, record=hold.model_dump(mode="json"))
                )
            head = await append_governance(conn, entries)
        await SqlGovernanceLog(self.db, self.anchors).anchor(head, entries)
        return released

    async def governance_reasons(self, run_id: str, at: datetime) -> list[str]:
        """Why the governance log says ``run_id`` is held (``SqlGovernanceLog.held_reasons``)."""
        return await SqlGovernanceLog(self.db, self.anchors).held_reasons(run_id, at)

    async def active_freezes(self, run_id: str) -> list[str]:
        """Ids of the incident freezes of ``run_id`` that are not released (evidence on hold)."""
        f = schema.evidence_freezes.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(f.incident_id).where(f.run_id == run_id, f.released_at.is_(None))
                )
            ).all()
        return sorted({row.incident_id for row in rows})

    async def incident_phase(self, incident_id: str) -> str | None:
        """The recorded phase of an incident (None when there is no such incident)."""
        i = schema.incidents.c
        async with self.db.read() as conn:
            row = (await conn.execute(select(i.phase).where(i.incident_id == incident_id))).first()
        return row.phase if row else None

    async def freezing_incidents(self, run_id: str) -> set[str]:
        """Every incident that froze ``run_id``'s evidence, released or not."""
        f = schema.evidence_freezes.c
        async with self.db.read() as conn:
            rows = (await conn.execute(select(f.incident_id).where(f.run_id == run_id))).all()
        return {row.incident_id for row in rows}

    async def release_freezes(
        self, run_id: str, incident_id: str, at: datetime, *, by: str = "cli", reason: str = ""
    ) -> list[str]:
        """Release the incident's unreleased freezes of ``run_id``; returns their ids."""
        from stores.sql.incidents import SqlIncidentStore

        f = schema.evidence_freezes.c
        async with self.db.read() as conn:
            rows = (
                await conn.execute(
                    select(f.freeze_id).where(
                        f.run_id == run_id, f.incident_id == incident_id, f.released_at.is_(None)
                    )
                )
            ).all()
        store = SqlIncidentStore(self.db)
        for row in rows:
            await store.release_freeze(row.freeze_id, at, by=by, reason=reason)
        log = SqlGovernanceLog(self.db, self.anchors)
        orphaned = await log.release_orphaned_freezes(run_id, incident_id, at, by, reason)
        if rows:  # the releases just chained go outside the database too
            await log.anchor_current(at)
        return sorted([*(row.freeze_id for row in rows), *orphaned])

    async def receipt(self, request_id: str) -> DeletionReceipt | None:
        d = schema.deletion_receipts.c
        async with self.db.read() as conn:
            row = (await conn.execute(select(d.record).where(d.request_id == request_id))).first()
        return DeletionReceipt.model_validate(row.record) if row else None

    async def receipts(self) -> list[DeletionReceipt]:
        d = schema.deletion_receipts.c
        async with self.db.read() as conn:
            rows = (await conn.execute(select(d.record).order_by(d.executed_at))).all()
        return [DeletionReceipt.model_validate(row.record) for row in rows]

    async def put_receipt(self, receipt: DeletionReceipt) -> None:
        async with self.db.transaction() as conn:
            await conn.execute(
                insert(schema.deletion_receipts).values(
                    request_id=receipt.request_id,
                    subject_id=receipt.subject_id,
                    executed_at=receipt.executed_at,
                    record=receipt.model_dump(mode="json"),
                )
            )
