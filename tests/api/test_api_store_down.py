"""A store that cannot be reached answers 503 with ``Retry-After`` on every route of the API,
never a 500 and never a dropped connection."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import httpx
import pytest

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from tests.api.test_api_http import settings_for

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_every_route_answers_503_with_retry_after_when_the_database_is_down(
    tmp_path: Path,
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    app = create_app(
        settings_for(tmp_path, url), ApiConfig(tokens={"adm": frozenset(Role)}, max_body_bytes=4096)
    )
    answers: dict[str, int] = {}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api"
    ) as client:
        for path, methods in app.openapi()["paths"].items():
            concrete = re.sub(r"\{(\w*sequence\w*)\}", "1", path)
            concrete = re.sub(r"\{\w+\}", "x-1", concrete)
            for method in methods:
                response = await client.request(
                    method.upper(),
                    concrete,
                    headers={"Authorization": "Bearer adm"},
                    json={} if method in ("post", "put") else None,
                    # a raw read must give its reason (422 without one, before any store)
                    params={"reason": "store-down test"} if method == "get" else None,
                )
                answers[f"{method.upper()} {path}"] = response.status_code
                assert response.status_code < 500 or response.status_code == 503, (
                    path,
                    response.text,
                )
                if response.status_code == 503:
                    assert response.headers["Retry-After"].isdigit()
                    assert response.json()["code"] == "store_error"
    await app.state.api.close()
    gets = {k: v for k, v in answers.items() if k.startswith("GET /api/") and "health" not in k}
    assert gets and set(gets.values()) == {503}, {k: v for k, v in gets.items() if v != 503}
