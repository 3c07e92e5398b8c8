"""schemathesis against the API application itself (served by uvicorn in a thread, over real
SQLite stores and a Temporal dev server of its own, no worker): for every operation of
/openapi.json, valid and invalid requests, a few each, as an admin. No answer may be a 5xx,
and every status answered must be one the schema lists for that operation. (The dev-stack
test, ``test_api_stack.py``, fuzzes the served stack for 5xx too.)"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from devstack.ports import free_ports
from devstack.temporal_server import start_temporal_dev_server
from worker.settings import Settings

TOKEN = "schema-admin"
#: examples per operation and generation mode: enough to reach every answer, bounded in time
EXAMPLES = 10


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("api-schema")
    temporal = start_temporal_dev_server(root / "temporal", headless=True)
    settings_ = Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(root / "home"),
            "TEMPORAL_ADDRESS": temporal.address,
            "REPLAYBOOK_LOG_FORMAT": "json",
            "REPLAYBOOK_LOCAL_MODELS": "off",
        }
    )
    app = create_app(settings_, ApiConfig(tokens={TOKEN: frozenset({Role.ADMIN})}))
    (port,) = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        _seed(url)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        temporal.stop(timeout=20)


def _seed(url: str) -> None:
    """One ingested run, so that the run routes answer with a run too."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        header = {"run_id": "schema-run", "started_at": "2026-01-01T00:00:00Z"}
        assert client.post("/api/runs", json=header).status_code == 201
        events = {"events": [{"type": "user_message", "sequence": 1, "content": "hello"}]}
        assert client.post("/api/runs/schema-run/events", json=events).status_code == 201


def test_no_undocumented_status_and_no_5xx(served: str) -> None:
    schema = httpx.get(f"{served}/openapi.json").json()
    documented = {
        (method.upper(), path): {int(code) for code in op["responses"]}
        for path, item in schema["paths"].items()
        for method, op in item.items()
    }
    api = schemathesis.openapi.from_url(f"{served}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) == len(documented) >= 15
    token = {"Authorization": f"Bearer {TOKEN}"}
    seen: set[tuple[str, int]] = set()
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    for operation, mode in itertools.product(operations, modes):

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        def answers_as_documented(case: Any) -> None:
            key = (case.operation.method.upper(), case.operation.path)
            response = case.call(headers=token, timeout=60)
            seen.add((f"{key[0]} {key[1]}", response.status_code))
            assert response.status_code < 500, (case.method, case.formatted_path, response.text)
            assert response.status_code in documented[key], (
                f"{key[0]} {case.formatted_path} answered {response.status_code}, "
                f"not in the schema's {sorted(documented[key])}: {response.text[:300]}"
            )

        try:
            answers_as_documented()
        except Unsatisfiable:
            # nothing to make invalid (an operation without parameters or body)
            assert mode is schemathesis.GenerationMode.NEGATIVE
    # the requests reached the handlers, not only the validation in front of them
    statuses = {status for _, status in seen}
    assert {200, 404, 422} <= statuses, sorted(seen)


def test_every_api_route_documents_the_answers_any_route_can_give(tmp_path: Path) -> None:
    settings_ = Settings.from_env({"REPLAYBOOK_HOME": str(tmp_path)})
    app = create_app(settings_, ApiConfig(tokens={TOKEN: frozenset({Role.ADMIN})}))
    operations = [
        (method, path, op)
        for path, item in app.openapi()["paths"].items()
        if path.startswith("/api/") and path != "/api/health"
        for method, op in item.items()
    ]
    assert len(operations) >= 15
    for method, path, op in operations:
        codes = set(op["responses"])
        assert {"400", "401", "403", "422", "503"} <= codes, (method, path)
        assert method != "post" or "413" in codes, (method, path)
        assert "{" not in path or "404" in codes, (method, path)  # an id that may not exist
