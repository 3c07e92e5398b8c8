"""Input the API once accepted silently or answered with a 5xx: a run id of the documented
pattern too long to be a file name when quoted, numbers for instants, a chat role no model
knows, two tools of one name, a negative cost; and the published schema's references."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.test_api_http import api, auth  # noqa: F401  (the fixture, on both databases)

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_run_id_of_the_documented_pattern_works_end_to_end(
    api: tuple[httpx.AsyncClient, str],  # noqa: F811
) -> None:
    from tests.runtime.test_ingest import USER_LINES, header, run_plain_agent

    client, _ = api
    eng = auth("eng-token")
    # RUN_ID_PATTERN allows it; quoted for a file name it was 391 bytes ("File name too long")
    run_id = f"a{id(client) % 1000:03d}" + ":" * 130
    created = await client.post(
        "/api/runs", json=header(run_id).model_dump(mode="json"), headers=eng
    )
    assert created.status_code == 201, created.text
    events = run_plain_agent(USER_LINES).events
    ended = await client.post(f"/api/runs/{run_id}/events", json={"events": events}, headers=eng)
    assert ended.status_code == 201, ended.text
    assert ended.json()["ended"] is True  # the end anchors the run
    verified = await client.get(f"/api/runs/{run_id}/verify", headers=eng)
    assert verified.status_code == 200, verified.text
    assert verified.json()["intact"] is True and verified.json()["checked"]["anchors"] == 1
    assert verified.json()["anchor_log"]["signed"] is True


def _refused(answer: httpx.Response, field: str, *words: str) -> None:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["field"] == field, body
    for word in words:
        assert word in body["message"], body


async def test_the_api_refuses_what_it_once_accepted_silently(
    api: tuple[httpx.AsyncClient, str],  # noqa: F811
) -> None:
    from tests.runtime.test_ingest import header

    client, _ = api
    eng = auth("eng-token")
    run_id = f"strict-input-{id(client)}"
    head: dict[str, Any] = header(run_id).model_dump(mode="json")
    as_number = await client.post("/api/runs", json=head | {"started_at": 1767225600}, headers=eng)
    _refused(as_number, "started_at", "ISO 8601", "not the number")
    hacker = head | {"initial_messages": [{"role": "hacker", "content": "hi"}]}
    _refused(await client.post("/api/runs", json=hacker, headers=eng), "initial_messages", "hacker")
    twice = head | {
        "tools": [
            {"name": "t", "side_effect_class": "READ"},
            {"name": "t", "side_effect_class": "WRITE"},
        ]
    }
    _refused(await client.post("/api/runs", json=twice, headers=eng), "tools", "'t'")
    assert (await client.get(f"/api/runs/{run_id}", headers=eng)).status_code == 404
    assert (await client.post("/api/runs", json=head, headers=eng)).status_code == 201
    url = f"/api/runs/{run_id}/events"
    model = {"type": "model_call", "sequence": 1, "model": "m", "content": "hi"}
    negative = await client.post(url, json={"events": [model | {"cost": -1}]}, headers=eng)
    assert negative.status_code == 422 and negative.json()["field"].endswith("cost"), negative.text
    role = model | {"messages": [{"role": "hacker", "content": "x"}]}
    answer = await client.post(url, json={"events": [role]}, headers=eng)
    assert answer.status_code == 422 and "hacker" in answer.json()["message"], answer.text
    at_number = model | {"at": 1767225600}
    answer = await client.post(url, json={"events": [at_number]}, headers=eng)
    assert answer.status_code == 422 and answer.json()["field"].endswith("at"), answer.text
    # none of them recorded anything: the first event is still free
    assert (await client.post(url, json={"events": [model]}, headers=eng)).status_code == 201


def _references(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _references(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _references(value)]
    return []


def _resolve(schema: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = schema
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"{ref}: no {part!r}"
        node = node[part]
    return node


async def test_every_reference_of_the_published_schema_resolves(
    api: tuple[httpx.AsyncClient, str],  # noqa: F811
) -> None:
    client, _ = api
    schema = (await client.get("/openapi.json")).json()
    refs = sorted(set(_references(schema)))
    assert len(refs) > 10  # the walk found them
    broken = []
    for ref in refs:
        try:
            _resolve(schema, ref)
        except AssertionError as exc:
            broken.append(str(exc))
    assert broken == []
