"""The incident store contract (incidents, evidence freezes, regression cases) on SQLite and
PostgreSQL, and migration 0002 applied to databases already at 0001."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection

from models import EvidenceType, ExecutionEventType, RunRecord
from models.chain import GENESIS_HASH
from models.digest import sha256_digest
from models.errors import ConflictError, InvalidInputError, NotFoundError
from models.freeze import FreezeRecord
from models.regression import (
    ForbiddenSideEffect,
    RegressionCase,
    RegressionCaseStatus,
    RequiredToolSequence,
)
from stores.sql import schema
from stores.sql.database import MIGRATIONS_DIR, Database, open_database, upgrade_schema
from stores.sql.incidents import SqlIncidentStore
from stores.sql.ledger import NewEvent, SqlLedger
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from tests.fixtures_db import PG_ADMIN_URL

T0 = datetime(2026, 8, 20, 10, 15, tzinfo=UTC)
DAY = timedelta(days=1)
MY_TABLES = {"incidents", "evidence_freezes", "regression_cases"}


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store(database: Database) -> SqlIncidentStore:
    return SqlIncidentStore(database)


async def make_run(database: Database) -> str:
    run_id = uid("run")
    await SqlLedger(database, group_commit=False).create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=T0)
    )
    return run_id


# incidents ----------------------------------------------------------------------------------


async def test_incident_is_upserted_and_keeps_its_creation_time(store, database) -> None:
    run_id = await make_run(database)
    incident_id = uid("inc")
    opened = await store.save_incident(
        incident_id, run_id, None, None, None, "FREEZING", {"counterfactuals": []}, at=T0
    )
    assert (opened.phase, opened.signature, opened.failure_type) == ("FREEZING", None, None)
    assert opened.created_at == opened.updated_at == T0

    later = T0 + timedelta(minutes=5)
    signed = await store.save_incident(
        incident_id,
        run_id,
        "SIDE_EFFECT",
        "SIDE_EFFECT_UNKNOWN_NO_RETRY",
        "SIDE_EFFECT_UNKNOWN_NO_RETRY:ab12",
        "SIGNING",
        {"counterfactuals": [], "facts": {"capability": "payment.refund"}},
        at=later,
    )
    assert signed.created_at == T0 and signed.updated_at == later
    got = await store.get_incident(incident_id)
    assert got == signed
    assert got.failure_type == "SIDE_EFFECT" and got.phase == "SIGNING"
    assert got.record == {"counterfactuals": [], "facts": {"capability": "payment.refund"}}
    listed = await store.list_incidents(source_run_id=run_id)
    assert [i.incident_id for i in listed] == [incident_id]


async def test_incident_refuses_another_run_unknown_run_and_bad_input(store, database) -> None:
    run_id, other = await make_run(database), await make_run(database)
    incident_id = uid("inc")
    await store.save_incident(incident_id, run_id, None, None, None, "FREEZING", {}, at=T0)
    with pytest.raises(ConflictError, match=f"incident {incident_id} is recorded for run"):
        await store.save_incident(incident_id, other, None, None, None, "SIGNING", {}, at=T0)
    assert (await store.get_incident(incident_id)).phase == "FREEZING"
    with pytest.raises(NotFoundError, match="run 'no-such-run' is not recorded"):
        await store.save_incident(uid("inc"), "no-such-run", None, None, None, "FREEZING", {})
    with pytest.raises(InvalidInputError, match="unknown failure type 'WEATHER'"):
        await store.save_incident(uid("inc"), run_id, "WEATHER", "X", "X", "SIGNING", {})
    with pytest.raises(InvalidInputError, match="needs an incident_id"):
        await store.save_incident(uid("inc"), run_id, None, None, None, "", {})
    with pytest.raises(NotFoundError, match="incident 'no-such-incident' is not recorded"):
        await store.get_incident("no-such-incident")


async def test_incidents_group_by_signature_with_counts(store, database) -> None:
    run_id = await make_run(database)
    tag = uuid.uuid4().hex[:8]
    duplicate = f"SIDE_EFFECT_UNKNOWN_RETRY_DUPLICATE_{tag}"
    wrong = f"DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT_{tag}"
    plan = [(duplicate, "SIDE_EFFECT")] * 3 + [(wrong, "DATA")] * 2
    ids = []
    for i, (signature, failure_type) in enumerate(plan):
        incident_id = uid("inc")
        ids.append(incident_id)
        at = T0 + timedelta(seconds=i)
        await store.save_incident(
            incident_id, run_id, failure_type, signature, f"{signature}:k", "SIGNING", {}, at=at
        )
    unsigned = uid("inc")
    await store.save_incident(unsigned, run_id, None, None, None, "FREEZING", {}, at=T0)

    groups = [g for g in await store.signature_groups() if g["signature"] in (duplicate, wrong)]
    unconfirmed: dict[str, Any] = {"confirmed_failure_types": {}}
    assert groups == [
        {
            "signature": duplicate,
            "failure_type": "SIDE_EFFECT",
            "automatic_failure_type": "SIDE_EFFECT",
            **unconfirmed,
            "count": 3,
            "incident_ids": ids[:3],
        },
        {
            "signature": wrong,
            "failure_type": "DATA",
            "automatic_failure_type": "DATA",
            **unconfirmed,
            "count": 2,
            "incident_ids": ids[3:],
        },
    ]
    all_grouped = {i for g in await store.signature_groups() for i in g["incident_ids"]}
    assert unsigned not in all_grouped
    counts = [g["count"] for g in await store.signature_groups()]
    assert counts == sorted(counts, reverse=True)
    by_signature = await store.list_incidents(signature=wrong)
    assert {i.incident_id for i in by_signature} == set(ids[3:])


# evidence freezes ---------------------------------------------------------------------------


def freeze_record(run_id: str, **changes: object) -> FreezeRecord:
    fields: dict[str, object] = {
        "freeze_id": uid("frz"),
        "incident_id": uid("inc"),
        "run_id": run_id,
        "types": [EvidenceType.PROMPT, EvidenceType.EVENT, EvidenceType.PROMPT],
        "retention_until": T0 + 365 * DAY,
        "chain_head_sequence": 0,
        "chain_head_hash": GENESIS_HASH,
        "artifact_digests": [sha256_digest(b"b"), sha256_digest(b"a")],
        "enforced_by_backend": False,
        "created_at": T0,
        **changes,
    }
    return FreezeRecord.model_validate(fields)


async def test_freeze_is_recorded_once_and_retries_change_nothing(store, database) -> None:
    run_id = await make_run(database)
    freeze = freeze_record(run_id)
    assert freeze.types == (EvidenceType.EVENT, EvidenceType.PROMPT)
    assert list(freeze.artifact_digests) == sorted(freeze.artifact_digests)
    assert await store.record_freeze(freeze) == freeze
    # a retried activity at another time: the first record stands
    retried = freeze.model_copy(update={"created_at": T0 + timedelta(minutes=3)})
    assert await store.record_freeze(retried) == freeze
    assert await store.freezes_for_run(run_id) == [freeze]
    assert await store.get_freeze(freeze.freeze_id) == freeze
    assert await store.frozen_until(run_id) == freeze.retention_until

    # a retry whose retention was computed later extends the freeze; an earlier one does not
    later = freeze.retention_until + DAY
    extended = await store.record_freeze(
        freeze.model_copy(update={"retention_until": later, "created_at": T0 + DAY})
    )
    assert extended == freeze.model_copy(update={"retention_until": later})
    assert await store.frozen_until(run_id) == later
    assert await store.record_freeze(freeze) == extended
    assert await store.get_freeze(freeze.freeze_id) == extended

    moved = freeze.model_copy(update={"chain_head_sequence": 7})
    with pytest.raises(ConflictError, match=f"freeze {freeze.freeze_id} .* chain_head_sequence"):
        await store.record_freeze(moved)
    with pytest.raises(NotFoundError, match="run 'no-such-run' is not recorded"):
        await store.record_freeze(freeze_record("no-such-run"))
    async with database.read() as conn:
        row = (
            await conn.execute(
                schema.evidence_freezes.select().where(
                    schema.evidence_freezes.c.freeze_id == freeze.freeze_id
                )
            )
        ).one()
    assert (row.artifact_count, row.enforced_by_backend, row.chain_head_hash) == (
        2,
        False,
        GENESIS_HASH,
    )
    assert row.types == ["EVENT", "PROMPT"]


async def test_frozen_until_is_the_latest_active_freeze(store, database) -> None:
    run_id = await make_run(database)
    assert await store.frozen_until(run_id) is None
    short = freeze_record(run_id, retention_until=T0 + 30 * DAY, created_at=T0)
    long = freeze_record(run_id, retention_until=T0 + 400 * DAY, created_at=T0 + DAY)
    await store.record_freeze(short)
    await store.record_freeze(long)
    assert await store.frozen_until(run_id) == T0 + 400 * DAY
    assert [f.freeze_id for f in await store.freezes_for_run(run_id)] == [
        short.freeze_id,
        long.freeze_id,
    ]

    released = await store.release_freeze(long.freeze_id, T0 + 2 * DAY)
    assert released.released_at == T0 + 2 * DAY and not released.active
    assert await store.frozen_until(run_id) == T0 + 30 * DAY
    # releasing again keeps the first release time
    again = await store.release_freeze(long.freeze_id, T0 + 9 * DAY)
    assert again.released_at == T0 + 2 * DAY
    assert (await store.get_freeze(long.freeze_id)).released_at == T0 + 2 * DAY
    # only freezes still in force at ``at`` count when it is given
    assert await store.frozen_until(run_id, at=T0 + 10 * DAY) == T0 + 30 * DAY
    assert await store.frozen_until(run_id, at=T0 + 31 * DAY) is None
    # a released freeze is still listed, and recording it again does not undo the release
    assert await store.record_freeze(long) == released
    assert len(await store.freezes_for_run(run_id)) == 2
    with pytest.raises(NotFoundError, match="freeze 'no-such-freeze' is not recorded"):
        await store.release_freeze("no-such-freeze", T0)


# regression cases ---------------------------------------------------------------------------


def regression_case(**changes: object) -> RegressionCase:
    fields: dict[str, object] = {
        "case_id": uid("case"),
        "incident_id": uid("inc"),
        "source_run_id": uid("run"),
        "created_at": T0,
        "description": "no email to a customer other than the one asked about",
        "assertions": [
            ForbiddenSideEffect(capability_id="email.send"),
            RequiredToolSequence(capability_ids=("crm.get_customer",)),
        ],
        **changes,
    }
    return RegressionCase.model_validate(fields)


async def test_cases_are_put_listed_and_retired(store) -> None:
    first, second = regression_case(), regression_case(created_at=T0 + DAY)
    assert await store.put_case(first) == first
    assert await store.put_case(first) == first  # a retried put changes nothing
    await store.put_case(second)
    assert await store.get_case(first.case_id) == first
    active = [c.case_id for c in await store.active_cases()]
    assert active.index(first.case_id) < active.index(second.case_id)

    at = T0 + 2 * DAY
    retired = await store.retire_case(first.case_id, "fixed by prompt v18", at)
    assert retired.status is RegressionCaseStatus.RETIRED
    assert (retired.retired_reason, retired.retired_at) == ("fixed by prompt v18", at)
    assert await store.get_case(first.case_id) == retired
    active = [c.case_id for c in await store.active_cases()]
    assert first.case_id not in active and second.case_id in active
    retired_ids = [c.case_id for c in await store.list_cases(status=RegressionCaseStatus.RETIRED)]
    assert first.case_id in retired_ids
    assert [c.case_id for c in await store.list_cases(incident_id=first.incident_id)] == [
        first.case_id
    ]
    # a case is never put back to ACTIVE by a second put
    with pytest.raises(ConflictError, match=f"regression case {first.case_id} is already stored"):
        await store.put_case(first)


async def test_retiring_refuses_unknown_ids_empty_reasons_and_twice(store) -> None:
    case = regression_case()
    await store.put_case(case)
    with pytest.raises(NotFoundError, match="regression case 'case-that-never-was'"):
        await store.retire_case("case-that-never-was", "obsolete", T0)
    for reason in ("", "   "):
        with pytest.raises(InvalidInputError, match=f"retiring regression case {case.case_id}"):
            await store.retire_case(case.case_id, reason, T0)
    assert (await store.get_case(case.case_id)).status is RegressionCaseStatus.ACTIVE
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        await store.retire_case(case.case_id, "obsolete", datetime(2026, 1, 1))
    await store.retire_case(case.case_id, "obsolete", T0)
    with pytest.raises(ConflictError, match="already retired: obsolete"):
        await store.retire_case(case.case_id, "again", T0)
    with pytest.raises(NotFoundError, match="regression case 'nope' is not recorded"):
        await store.get_case("nope")


async def test_other_content_under_a_case_id_is_refused(store) -> None:
    case = regression_case()
    await store.put_case(case)
    changed = case.model_copy(update={"description": "something else"})
    with pytest.raises(ConflictError, match="retire it and create a new case"):
        await store.put_case(changed)
    assert await store.get_case(case.case_id) == case


# migration 0002 -----------------------------------------------------------------------------


def _script_head() -> str:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(config).get_current_head()  # type: ignore[return-value]


def _alembic(connection: Connection, command_name: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["connection"] = connection
    getattr(command, command_name)(config, revision)


async def test_migrated_tables_match_the_schema(database) -> None:
    def differences(connection: Connection) -> list[object]:
        context = MigrationContext.configure(connection)
        diffs = compare_metadata(context, schema.metadata)
        return [d for d in diffs if MY_TABLES & _tables_named(d)]

    async with database.read() as conn:
        assert await conn.run_sync(differences) == []


def _tables_named(diff: object) -> set[str]:
    found: set[str] = set()
    stack = [diff]
    while stack:
        item = stack.pop()
        if isinstance(item, list | tuple):
            stack.extend(item)
        elif hasattr(item, "name") and isinstance(getattr(item, "name", None), str):
            table = getattr(item, "table", None)
            found.add(table.name if table is not None else item.name)
        elif isinstance(item, str):
            found.add(item)
    return found


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_at_0001(request, tmp_path: Path) -> AsyncIterator[Database]:
    """A fresh database brought to 0001 only, as an existing installation would be."""
    if request.param == "sqlite":
        url, scratch = f"sqlite+aiosqlite:///{tmp_path / 'at-0001.db'}", None
    else:
        url = scratch = await create_scratch_database(PG_ADMIN_URL, "rb_mig")
    db = await open_database(url, migrate=False)
    async with db.engine.begin() as conn:
        await conn.run_sync(_alembic, "upgrade", "0001")
    try:
        yield db
    finally:
        await db.dispose()
        if scratch is not None:
            await drop_scratch_database(PG_ADMIN_URL, scratch)


async def _version(db: Database) -> str:
    async with db.read() as conn:
        return (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar_one()


async def _tables(db: Database) -> set[str]:
    def names(connection: Connection) -> set[str]:
        from sqlalchemy import inspect

        return set(inspect(connection).get_table_names())

    async with db.read() as conn:
        return await conn.run_sync(names)


async def test_a_database_at_0001_upgrades_cleanly_and_keeps_its_runs(database_at_0001) -> None:
    db = database_at_0001
    assert await _version(db) == "0001"
    assert not MY_TABLES & await _tables(db)
    ledger = SqlLedger(db, group_commit=False)
    run_id = await make_run(db)
    events = [
        NewEvent(
            f"s{i}", ExecutionEventType.MODEL_CALL, T0 + timedelta(seconds=i), payload={"i": i}
        )
        for i in range(3)
    ]
    await ledger.append_many(run_id, events)
    head = (await ledger.verify(run_id)).head_hash

    await upgrade_schema(db)
    assert await _version(db) == _script_head()
    assert MY_TABLES <= await _tables(db)
    verified = await ledger.verify(run_id)
    assert verified.intact and verified.event_count == 3 and verified.head_hash == head
    store = SqlIncidentStore(db)
    await store.save_incident("inc-1", run_id, None, None, None, "FREEZING", {}, at=T0)
    await store.record_freeze(freeze_record(run_id, chain_head_sequence=3, chain_head_hash=head))
    await store.put_case(regression_case())
    await upgrade_schema(db)  # idempotent
    assert await _version(db) == _script_head()

    # and back down: 0002's tables go, the evidence of 0001 stays
    async with db.engine.begin() as conn:
        await conn.run_sync(_alembic, "downgrade", "0001")
    assert await _version(db) == "0001"
    assert not MY_TABLES & await _tables(db)
    assert (await ledger.verify(run_id)).intact
