"""The API's event endpoints (rule 17) in process, over the real stores on SQLite and on a
PostgreSQL database of their own: sanitized for readers, raw for the forensic role with a
reason, every raw attempt audited under the caller's identity, 410 once destroyed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
import pytest_asyncio

from api import create_app
from api.auth import Principal, Role, fingerprint, parse_tokens
from api.config import ApiConfig
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.base import format_instant
from models.errors import ConfigurationError
from runtime.privacy.service import PrivacyService
from stores.bundle import Stores, open_stores
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from stores.sql.support_desk_world import SqlWorldStore
from tests.api.test_api_http import auth, settings_for
from tests.fixtures_db import PG_ADMIN_URL

pytestmark = pytest.mark.asyncio(loop_scope="session")

PHONE = "+1-555-0199"
TOKENS = parse_tokens(
    "view-token=viewer, eng-token=engineer, for-token=forensic@alice, adm-token=admin@root,"
    "anon-for-token=forensic",
    "test",
)


@dataclass
class PrivacyApi:
    client: httpx.AsyncClient
    stores: Stores
    run_id: str
    sequence: int


def _privacy(papi: PrivacyApi) -> PrivacyService:
    """The stack's privacy service (configured: these tests run with a KEK)."""
    assert papi.stores.privacy is not None
    return papi.stores.privacy


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=["sqlite", "postgresql"])
async def papi(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[PrivacyApi]:
    """The API over a database of its own (a deletion is database-wide) holding one
    wrong-customer run; ``sequence`` is an event of it whose raw payload differs."""
    home = tmp_path_factory.mktemp(f"privacy-api-{request.param}")
    pg_url = None
    if request.param == "postgresql":
        pg_url = await create_scratch_database(PG_ADMIN_URL, "rb_privacy_api")
    url = pg_url or f"sqlite+aiosqlite:///{home / 'replaybook.db'}"
    settings = settings_for(home, url)
    try:
        async with open_stores(settings.stores) as stores:
            world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
            await world.ensure()
            result = await run_scenario(world, stores.ledger, stores.artifacts, "wrong-customer")
            sequence = next(
                e.sequence
                for e in await stores.ledger.events(result.run_id)
                if e.type == "TOOL_CALL"
            )
            app = create_app(settings, ApiConfig(tokens=TOKENS))
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
                yield PrivacyApi(client, stores, result.run_id, sequence)
            await app.state.api.close()
    finally:
        if pg_url:
            await drop_scratch_database(PG_ADMIN_URL, pg_url)


async def test_token_entries_may_name_their_holder() -> None:
    assert TOKENS["for-token"] == frozenset({Role.FORENSIC})
    assert TOKENS["for-token"].name == "alice"  # type: ignore[attr-defined]
    assert getattr(TOKENS["anon-for-token"], "name", None) is None
    assert Principal("abc", frozenset({Role.FORENSIC}), "alice").identity == "api:alice"
    assert Principal("abc", frozenset({Role.FORENSIC})).identity == "api:token:abc"
    for bad, needle in (("t=forensic@", "names no one"), ("t=forensic@a b", "names no one")):
        with pytest.raises(ConfigurationError, match=needle):
            parse_tokens(bad, "env")
    with pytest.raises(ConfigurationError, match="already given to 'alice'"):
        parse_tokens("t=forensic@alice,t=viewer@bob", "env")


async def test_event_endpoint_is_sanitized_for_every_reader(papi: PrivacyApi) -> None:
    path = f"/api/runs/{papi.run_id}/events/{papi.sequence}"
    assert (await papi.client.get(path)).status_code == 401
    for token in ("view-token", "eng-token", "for-token"):
        answer = await papi.client.get(path, headers=auth(token))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["view"] == "sanitized" and body["raw_state"] == "AVAILABLE"
        assert body["type"] == "TOOL_CALL" and body["redaction_policy_version"] == "redact-v2"
        assert PHONE not in json.dumps(body["payload"]) and "<phone:" in answer.text
    missing = await papi.client.get(
        f"/api/runs/{papi.run_id}/events/9999", headers=auth("view-token")
    )
    assert missing.status_code == 422 and "9999" in missing.json()["message"]
    unknown = await papi.client.get("/api/runs/run-nope/events/1", headers=auth("view-token"))
    assert unknown.status_code == 404 and unknown.json()["field"] == "run_id"


async def test_raw_needs_the_forensic_role_and_a_reason_and_is_audited_by_identity(
    papi: PrivacyApi,
) -> None:
    path = f"/api/runs/{papi.run_id}/events/{papi.sequence}/raw"
    before = len(await _privacy(papi).records.audits())
    for token in ("view-token", "eng-token"):
        refused = await papi.client.get(path, params={"reason": "curious"}, headers=auth(token))
        assert refused.status_code == 403, refused.text
        assert refused.json()["field"] == "Authorization" and "forensic" in refused.text
        assert PHONE not in refused.text
    no_reason = await papi.client.get(path, headers=auth("for-token"))
    assert no_reason.status_code == 422 and no_reason.json()["field"] == "reason"
    blank = await papi.client.get(path, params={"reason": "  "}, headers=auth("for-token"))
    assert blank.status_code == 422

    raw = await papi.client.get(path, params={"reason": "INC-9 review"}, headers=auth("for-token"))
    assert raw.status_code == 200, raw.text
    assert raw.json()["view"] == "raw" and PHONE in json.dumps(raw.json()["payload"])
    anon = await papi.client.get(
        path, params={"reason": "second opinion"}, headers=auth("anon-for-token")
    )
    assert anon.status_code == 200
    admin = await papi.client.get(path, params={"reason": "admin check"}, headers=auth("adm-token"))
    assert admin.status_code == 200

    audits = (await _privacy(papi).records.audits())[before:]
    assert [(a.actor, a.reason, a.outcome.value) for a in audits] == [
        ("api:token:" + fingerprint("view-token"), "curious", "DENIED"),
        ("api:token:" + fingerprint("eng-token"), "curious", "DENIED"),
        ("api:alice", "INC-9 review", "READ"),
        ("api:token:" + fingerprint("anon-for-token"), "second opinion", "READ"),
        ("api:root", "admin check", "READ"),
    ]
    assert all(a.run_id == papi.run_id and a.sequence == papi.sequence for a in audits)
    assert audits[0].role == "viewer" and audits[2].role == "forensic"


async def test_raw_of_a_deleted_subject_is_gone_with_410_naming_the_request(
    papi: PrivacyApi,
) -> None:
    receipt = await _privacy(papi).delete_subject("customer:C-2002", "DSR-api")
    assert papi.run_id in receipt.runs
    path = f"/api/runs/{papi.run_id}/events/{papi.sequence}"
    gone = await papi.client.get(
        f"{path}/raw", params={"reason": "DSR check"}, headers=auth("for-token")
    )
    assert gone.status_code == 410, gone.text
    expected = f"destroyed by deletion request DSR-api at {format_instant(receipt.executed_at)}"
    assert expected in gone.json()["message"]
    sanitized = await papi.client.get(path, headers=auth("view-token"))
    assert sanitized.status_code == 200 and sanitized.json()["raw_state"] == "DESTROYED"
    assert expected in sanitized.json()["raw_destroyed"]
    verify = await papi.client.get(f"/api/runs/{papi.run_id}/verify", headers=auth("view-token"))
    assert verify.json()["intact"] is True
    last = (await _privacy(papi).records.audits())[-1]
    assert (last.actor, last.outcome.value) == ("api:alice", "DESTROYED")
