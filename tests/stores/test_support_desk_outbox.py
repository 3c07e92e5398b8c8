"""The seed's outbox fault windows (§63, issue 30 item 8), on SQLite and PostgreSQL: the support
desk's ``email.send`` accepted into a transactional outbox, published by a relay to a broker (a
table of the world's database) and filed by a consumer. "Outbox written, broker send failed":
the relay retries, one e-mail. "Broker delivered twice": the consumer dedupes by the
idempotency key, one e-mail. Either way the recorded run shows one side effect."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from examples.support_desk.outbox import (
    FlakyBroker,
    MailConsumer,
    OutboxEmail,
    Relay,
    RelayCrashedError,
    TableBroker,
)
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models import SideEffectRecord, SideEffectStatus
from stores.bundle import Stores, open_stores
from stores.sql.support_desk_outbox import SqlWorldOutbox
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session", params=["sqlite", "postgresql"])
async def desk(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_url: str, postgres_url: str
) -> AsyncIterator[tuple[Stores, SimulatedWorld, SqlWorldOutbox]]:
    url = sqlite_url if request.param == "sqlite" else postgres_url
    settings = Settings.from_env({"REPLAYBOOK_HOME": str(tmp_path), "REPLAYBOOK_DATABASE_URL": url})
    async with open_stores(settings.stores) as stores:
        world_store = SqlWorldStore.beside(stores.db.engine.url)
        world = SimulatedWorld(world_store)
        await world.ensure()
        outbox = SqlWorldOutbox(world_store)
        await outbox.ensure()
        yield stores, world, outbox
        await world_store.dispose()


async def _emailed_run(desk: tuple[Stores, SimulatedWorld, SqlWorldOutbox]) -> tuple[str, str]:
    """A recorded run whose e-mail went into the outbox: its run id and the send's key."""
    stores, world, outbox = desk
    result = await run_scenario(
        world,
        stores.ledger,
        stores.artifacts,
        "happy",
        email_send=OutboxEmail(outbox).email_send,
    )
    effects = await stores.evidence.records(SideEffectRecord, result.run_id)
    (sent,) = [e for e in effects if e.capability_id == "email.send"]
    assert sent.status is SideEffectStatus.CONFIRMED
    return result.run_id, sent.idempotency_key


async def _consumer_from_now(outbox: SqlWorldOutbox) -> MailConsumer:
    """A consumer past what other tests left on the shared database's queue."""
    return MailConsumer(outbox, cursor=max((m["seq"] for m in await outbox.queued(0)), default=0))


async def _one_side_effect(stores: Stores, run_id: str) -> None:
    effects = await stores.evidence.records(SideEffectRecord, run_id)
    assert [e.capability_id for e in effects].count("email.send") == 1


async def test_outbox_written_broker_send_failed_the_relay_retries(desk) -> None:
    stores, _, outbox = desk
    consumer = await _consumer_from_now(outbox)
    run_id, key = await _emailed_run(desk)
    assert await outbox.counts(key) == {"outbox": 1, "broker": 0, "consumed": 0, "emails": 0}
    relay = Relay(outbox, FlakyBroker(TableBroker(outbox), failures=2))
    assert await relay.relay_once() == 0  # the broker link fails: the row stays
    assert await relay.relay_once() == 0
    (pending,) = await outbox.pending()
    assert pending["attempts"] == 2 and "connection reset" in pending["last_error"]
    assert await relay.relay_once() == 1
    assert await relay.relay_once() == 0  # published: nothing left to send
    assert await consumer.drain() == {"filed": 1, "duplicates": 0}
    assert await outbox.counts(key) == {"outbox": 1, "broker": 1, "consumed": 1, "emails": 1}
    await _one_side_effect(stores, run_id)


async def test_broker_delivered_twice_the_consumer_dedupes(desk) -> None:
    stores, _, outbox = desk
    consumer = await _consumer_from_now(outbox)
    run_id, key = await _emailed_run(desk)
    with pytest.raises(RelayCrashedError):  # published, died before marking the row
        await Relay(outbox, TableBroker(outbox), crash_after_publish=True).relay_once()
    assert await Relay(outbox, TableBroker(outbox)).relay_once() == 1  # the restarted relay
    assert await consumer.drain() == {"filed": 1, "duplicates": 1}
    assert await outbox.counts(key) == {"outbox": 1, "broker": 2, "consumed": 1, "emails": 1}
    await _one_side_effect(stores, run_id)
