"""The API in process (ASGI), over the real stores: tokens and roles, error answers naming the
field, body limits, OpenAPI, /metrics, and the runs endpoints on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from api import create_app
from api.auth import Role, parse_tokens
from api.config import ApiConfig
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from models.errors import ConfigurationError
from stores.bundle import open_stores
from stores.sql.support_desk_world import SqlWorldStore
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKENS = {
    "view-token": frozenset({Role.VIEWER}),
    "eng-token": frozenset({Role.ENGINEER}),
    "for-token": frozenset({Role.FORENSIC}),
    "adm-token": frozenset({Role.ADMIN}),
}


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def settings_for(home: Path, database_url: str) -> Settings:
    return Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # nothing here needs Temporal
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
    )


def api_config(env: dict[str, str]) -> ApiConfig:
    """The API's configuration from these variables only."""
    return ApiConfig.from_settings(Settings.from_env(env).api)


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=["sqlite", "postgresql"])
async def api(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_url: str,
    postgres_url: str,
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A client of the API over a database holding one recorded run (its id is returned)."""
    home = tmp_path_factory.mktemp(f"api-{request.param}")
    settings = settings_for(home, sqlite_url if request.param == "sqlite" else postgres_url)
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        result = await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=1)
    app = create_app(settings, ApiConfig(tokens=TOKENS, max_body_bytes=2048))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client, result.run_id
    await app.state.api.close()


async def test_every_api_endpoint_needs_a_token(api: tuple[httpx.AsyncClient, str]) -> None:
    client, run_id = api
    for method, path in [
        ("GET", "/api/runs"),
        ("GET", f"/api/runs/{run_id}"),
        ("GET", f"/api/runs/{run_id}/verify"),
        ("POST", "/api/replays"),
        ("GET", "/api/replays/r1"),
        ("POST", "/api/replays/r1/cancel"),
        ("POST", "/api/incidents"),
        ("GET", "/api/incidents/i1"),
        ("POST", "/api/incidents/i1/root-cause"),
        ("POST", "/api/incidents/i1/side-effects/s1/resolution"),
        ("GET", "/api/incidents/i1/report"),
    ]:
        missing = await client.request(method, path)
        assert missing.status_code == 401, (method, path, missing.text)
        assert missing.headers["www-authenticate"] == "Bearer"
        assert missing.json()["field"] == "Authorization"
        wrong = await client.request(method, path, headers=auth("eng-token-not"))
        assert wrong.status_code == 401 and "not valid" in wrong.json()["message"]


async def test_roles_decide_what_a_caller_may_do(api: tuple[httpx.AsyncClient, str]) -> None:
    client, run_id = api
    body = {"sourceRunId": run_id, "mode": "RECORDED"}
    for token in ("view-token", "for-token"):
        refused = await client.post("/api/replays", json=body, headers=auth(token))
        assert refused.status_code == 403, refused.text
        assert "engineer or admin" in refused.json()["message"]
    confirm = {"rootCause": "x", "fixVersion": "v18", "verifiedBy": "dana"}
    for token in ("view-token", "eng-token"):
        refused = await client.post(
            "/api/incidents/i1/root-cause", json=confirm, headers=auth(token)
        )
        assert refused.status_code == 403 and "forensic or admin" in refused.json()["message"]
    for token in TOKENS:
        listed = await client.get("/api/runs", headers=auth(token))
        assert listed.status_code == 200 and run_id in [r["run_id"] for r in listed.json()["runs"]]


async def test_runs_list_show_verify(api: tuple[httpx.AsyncClient, str]) -> None:
    client, run_id = api
    shown = (await client.get(f"/api/runs/{run_id}", headers=auth("view-token"))).json()
    assert shown["run_id"] == run_id and shown["event_count"] == len(shown["events"]) > 0
    assert shown["evidence_completeness"]["confidence"] == "FULL"
    verified = (await client.get(f"/api/runs/{run_id}/verify", headers=auth("view-token"))).json()
    assert verified["intact"] is True and verified["head_hash"] == shown["head_hash"]
    missing = await client.get("/api/runs/run-nope/verify", headers=auth("view-token"))
    assert missing.status_code == 404
    assert missing.json() == {
        "status": 404,
        "code": "run_not_found",
        "field": "run_id",
        "message": "run not found: 'run-nope'",
    }
    limited = await client.get("/api/runs?limit=0", headers=auth("view-token"))
    assert limited.status_code == 422 and limited.json()["field"] == "limit"


async def test_bad_bodies_name_the_field_and_the_problem(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    client, run_id = api
    eng = auth("eng-token")

    async def problem(body: object) -> dict:
        response = await client.post("/api/replays", json=body, headers=eng)
        assert response.status_code == 422, response.text
        return response.json()

    negative = await problem({"sourceRunId": run_id, "mode": "EXACT", "budget": {"maxCost": -1}})
    assert (
        negative["field"] == "budget.maxCost"
        and "greater than or equal to 0" in negative["message"]
    )
    typo = await problem({"sourceRunId": run_id, "mode": "EXACT", "candidatePrompt": "v18"})
    assert typo["field"] == "candidatePrompt" and "Extra inputs" in typo["message"]
    mode = await problem({"sourceRunId": run_id, "mode": "SIDEWAYS"})
    assert mode["field"] == "mode"
    needs = await problem({"sourceRunId": run_id, "mode": "PROMPT_SWAP"})
    assert needs["field"] == "candidatePromptVersion"
    assert needs["message"] == (
        "mode PROMPT_SWAP needs candidatePromptVersion (or candidateSystemPrompt or candidateTools)"
    )
    # a tool-loop candidate's catalogue is checked, each refusal naming the field (issue 32)
    tools = await problem(
        {
            "sourceRunId": run_id,
            "mode": "PROMPT_SWAP",
            "candidateTools": [{"name": "a"}, {"name": "a"}],
        }
    )
    assert tools["field"] == "candidateTools" and "tool 'a' is listed twice" in tools["message"]
    blank = await problem(
        {"sourceRunId": run_id, "mode": "PROMPT_SWAP", "candidateSystemPrompt": " "}
    )
    assert blank["field"] == "candidateSystemPrompt" and "must not be empty" in blank["message"]
    # the run is the support desk's (built on this runtime): it swaps prompt bundles instead
    wrong = await problem(
        {"sourceRunId": run_id, "mode": "PROMPT_SWAP", "candidateSystemPrompt": "Be kind."}
    )
    assert wrong["field"] == "candidateSystemPrompt" and "tool-loop runs" in wrong["message"]
    # the team's tools module: importable, under SANDBOX_LIVE, for a tool-loop run (issue 32)
    team = {"sourceRunId": run_id, "mode": "EXACT", "fixtureMissPolicy": "SANDBOX_LIVE"}
    missing = await problem({**team, "toolsModule": "no_such_team_tools"})
    assert missing["field"] == "toolsModule" and "cannot import" in missing["message"]
    desk = {**team, "toolsModule": "examples.live.desk_replay_tools"}
    live_only = await problem({**desk, "fixtureMissPolicy": "FAIL"})
    assert live_only["field"] == "toolsModule"
    assert "only under fixtureMissPolicy SANDBOX_LIVE" in live_only["message"]
    own = await problem(desk)
    assert own["field"] == "toolsModule" and "tool-loop runs" in own["message"]
    fork = await problem({"sourceRunId": run_id, "mode": "EXACT", "startFromStep": "planner-4"})
    assert fork["message"] == (
        "startFromStep is only for mode FORK_FROM_STEP or PROMPT_SWAP or MODEL_SWAP"
    )
    unknown = await problem({"sourceRunId": "run-9182", "mode": "RECORDED"})
    assert unknown["field"] == "sourceRunId" and "run not found" in unknown["message"]
    broken = await client.post(
        "/api/replays",
        content=b'{"sourceRunId": ',
        headers=eng | {"content-type": "application/json"},
    )
    assert broken.status_code == 422 and broken.json()["field"] == "body"
    incident = await client.post(
        "/api/incidents",
        json={"sourceRunId": run_id, "counterfactuals": [{"kind": "temperature", "value": "1"}]},
        headers=eng,
    )
    assert incident.status_code == 422 and incident.json()["field"] == "counterfactuals.kind"
    refused = await client.post(
        "/api/incidents",
        json={"sourceRunId": run_id, "toolsModule": "examples.live.desk_replay_tools"},
        headers=eng,
    )
    assert refused.status_code == 422 and refused.json()["field"] == "toolsModule", refused.text
    assert "only under the sandbox-live miss policy (here FAIL)" in refused.json()["message"]
    report = await client.get("/api/incidents/i1/report?format=pdf", headers=eng)
    assert report.status_code == 422 and report.json()["field"] == "format"


async def test_bodies_over_the_limit_get_413(api: tuple[httpx.AsyncClient, str]) -> None:
    client, run_id = api
    big = {"sourceRunId": run_id, "mode": "RECORDED", "denyApprovals": ["x" * 3000]}
    declared = await client.post("/api/replays", json=big, headers=auth("eng-token"))
    assert declared.status_code == 413
    assert declared.json()["field"] == "body" and "2048 bytes" in declared.json()["message"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(5):
            yield b" " * 1000

    streamed = await client.post(
        "/api/replays",
        content=chunks(),
        headers=auth("eng-token") | {"content-type": "application/json"},
    )
    assert streamed.status_code == 413 and streamed.json()["code"] == "payload_too_large"


async def test_openapi_metrics_and_health_are_open(api: tuple[httpx.AsyncClient, str]) -> None:
    client, _ = api
    schema = (await client.get("/openapi.json")).json()
    assert {
        "/api/replays",
        "/api/incidents/{incident_id}/report",
        "/api/runs/{run_id}/verify",
    } <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    replay = schema["components"]["schemas"]["ReplayCreate"]["properties"]
    assert {"sourceRunId", "candidatePromptVersion", "fixtureMissPolicy", "budget"} <= set(replay)
    metrics = await client.get("/metrics")
    assert metrics.status_code == 200 and "# TYPE" in metrics.text
    assert (await client.get("/api/health")).json() == {"status": "ok"}
    unknown = await client.get("/api/nothing")
    assert unknown.status_code == 404 and unknown.json()["field"] == "path"


async def test_tokens_are_configured_not_hard_coded(tmp_path: Path) -> None:
    assert parse_tokens("tokenA=engineer,tokenB=forensic+engineer", "env") == {
        "tokenA": frozenset({Role.ENGINEER}),
        "tokenB": frozenset({Role.FORENSIC, Role.ENGINEER}),
    }
    with pytest.raises(ConfigurationError, match="entry 2 has unknown role 'root'"):
        parse_tokens("a=viewer,b=root", "REPLAYBOOK_API_TOKENS")
    with pytest.raises(ConfigurationError, match="entry 1 is not TOKEN=ROLE"):
        parse_tokens("secret-without-role", "REPLAYBOOK_API_TOKENS")
    file = tmp_path / "tokens"
    file.write_text("# the on-call rota\nfile-token=forensic\n\n")
    config = api_config(
        {"REPLAYBOOK_API_TOKENS": "env-token=viewer", "REPLAYBOOK_API_TOKENS_FILE": str(file)}
    )
    assert config.tokens == {
        "env-token": frozenset({Role.VIEWER}),
        "file-token": frozenset({Role.FORENSIC}),
    }
    with pytest.raises(ConfigurationError, match="needs tokens"):
        api_config({})
    assert api_config({"REPLAYBOOK_API_INSECURE_DEV": "1"}).insecure_dev
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_API_MAX_BODY_BYTES"):
        api_config({"REPLAYBOOK_API_INSECURE_DEV": "1", "REPLAYBOOK_API_MAX_BODY_BYTES": "x"})


async def test_the_insecure_dev_flag_opens_the_api_as_admin(
    tmp_path: Path, sqlite_url: str
) -> None:
    app = create_app(settings_for(tmp_path, sqlite_url), ApiConfig(insecure_dev=True))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as client:
        assert (await client.get("/api/runs")).status_code == 200
    await app.state.api.close()


async def test_ingestion_is_idempotent_and_refuses_conflicts(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    from tests.runtime.test_ingest import USER_LINES, header, run_plain_agent

    client, _ = api
    eng = auth("eng-token")
    run_id = f"ingested-{id(client)}"
    head = header(run_id).model_dump(mode="json")
    assert (
        await client.post("/api/runs", json=head, headers=auth("view-token"))
    ).status_code == 403
    created = await client.post("/api/runs", json=head, headers=eng)
    assert created.status_code == 201, created.text
    assert (await client.post("/api/runs", json=head, headers=eng)).status_code == 200
    other = await client.post("/api/runs", json=head | {"system_prompt": "another"}, headers=eng)
    assert other.status_code == 409 and "another header" in other.json()["message"]

    events = run_plain_agent(USER_LINES).events
    url = f"/api/runs/{run_id}/events"
    first = await client.post(url, json={"events": events}, headers=eng)
    assert first.status_code == 201, first.text
    assert first.json()["recorded"] == len(events) and first.json()["ended"] is True
    again = await client.post(url, json={"events": events}, headers=eng)
    assert again.status_code == 200 and again.json()["duplicates"] == len(events)
    changed = dict(events[1], content="something else")
    conflict = await client.post(url, json={"events": [changed]}, headers=eng)
    assert conflict.status_code == 409 and conflict.json()["code"] == "sequence_conflict"
    assert "event 2 is already recorded" in conflict.json()["message"]
    missing = await client.post("/api/runs/nope/events", json={"events": events[:1]}, headers=eng)
    assert missing.status_code == 404 and missing.json()["field"] == "run_id"
    bad = await client.post(
        url, json={"events": [{"type": "model_call", "sequence": 0}]}, headers=eng
    )
    assert bad.status_code == 422 and bad.json()["field"].startswith("events")
    verified = await client.get(f"/api/runs/{run_id}/verify", headers=eng)
    assert verified.json()["intact"] is True


async def test_ingestion_races_resends_and_refused_headers_over_http(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    import asyncio

    from tests.runtime.test_ingest import header

    client, _ = api
    eng = auth("eng-token")
    run_id = f"race1-{id(client)}"
    head = header(run_id).model_dump(mode="json")
    created = await asyncio.gather(
        *(client.post("/api/runs", json=head, headers=eng) for _ in range(4))
    )
    assert sorted(r.status_code for r in created) == [200, 200, 200, 201]
    url = f"/api/runs/{run_id}/events"
    answers = await asyncio.gather(
        *(
            client.post(
                url,
                json={"events": [{"type": "user_message", "sequence": 1, "content": f"v {i}"}]},
                headers=eng,
            )
            for i in range(8)
        )
    )
    assert sorted(r.status_code for r in answers) == [201] + [409] * 7
    assert all("event 1" in r.json()["message"] for r in answers if r.status_code == 409)
    opaque = {"events": [{"type": "opaque", "sequence": 2, "source": "s", "reason": "r"}]}
    assert (await client.post(url, json=opaque, headers=eng)).status_code == 201
    assert (await client.post(url, json=opaque, headers=eng)).status_code == 200
    model = {"events": [{"type": "model_call", "sequence": 3, "model": "m", "content": "hi"}]}
    assert (await client.post(url, json=model, headers=eng)).status_code == 201

    refused = f"refused-{id(client)}"
    huge = header(refused).model_dump(mode="json") | {"max_model_calls": 1180591620717411303424}
    answer = await client.post("/api/runs", json=huge, headers=eng)
    assert answer.status_code == 422 and answer.json()["field"] == "max_model_calls"
    assert (await client.get(f"/api/runs/{refused}", headers=eng)).status_code == 404
    fixed = header(refused).model_dump(mode="json")
    assert (await client.post("/api/runs", json=fixed, headers=eng)).status_code == 201


async def test_ingestion_refuses_what_json_cannot_say_faithfully(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    from tests.runtime.test_ingest import header

    client, _ = api
    eng = auth("eng-token") | {"Content-Type": "application/json"}
    head = header(f"strict-{id(client)}").model_dump(mode="json")
    text = json.dumps(head)
    bodies = {
        "duplicate key": text[:-1] + ', "run_id": "other"}',
        "NaN": text[:-1] + ', "attachments": {"x": NaN}}',
        "lone surrogate": text[:-1] + ', "system_prompt": "\\ud800"}',
        "nested": text[:-1] + ', "attachments": {"x": ' + "[" * 5000 + "]" * 5000 + "}}",
        "coerced bool": json.dumps(head | {"user_turns": "yes"}),
        "coerced int": json.dumps(head | {"max_model_calls": True}),
        "run id": json.dumps(head | {"run_id": "a/b c"}),
    }
    for what, body in bodies.items():
        answer = await client.post("/api/runs", content=body, headers=eng)
        assert answer.status_code == 422, (what, answer.text)
    paths = (await client.get("/openapi.json")).json()["paths"]
    for code in ("401", "403", "404", "409", "422", "503"):
        assert code in paths["/api/runs/{run_id}/events"]["post"]["responses"]
