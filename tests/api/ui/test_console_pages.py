"""The console's pages in process (ASGI) over the real stores, on SQLite and PostgreSQL: the
tokens and the login cookie, CSRF on forms, keyset paging and filters of the runs page, bad
input named. The browser tests (test_console_browser.py) drive the workflows."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from api import create_app
from api.auth import Role
from api.config import ApiConfig
from examples.support_desk.providers import SimulatedWorld
from examples.support_desk.spec import run_scenario
from stores.bundle import open_stores
from stores.sql.scratch import create_scratch_database, drop_scratch_database
from stores.sql.support_desk_world import SqlWorldStore
from tests.fixtures_db import PG_ADMIN_URL
from worker.settings import Settings

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKENS = {"view-ui": frozenset({Role.VIEWER}), "eng-ui": frozenset({Role.ENGINEER})}
VIEWER = {"authorization": "Bearer view-ui"}
RUN_LINK = re.compile(r'<td><a href="/ui/runs/(run-[0-9a-f]+)">')


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=["sqlite", "postgresql"])
async def console(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[httpx.AsyncClient, list[str]]]:
    """A client of the console over a database of its own holding three runs (ids newest
    first): the session's shared databases hold other tests' runs, which the pages list."""
    home: Path = tmp_path_factory.mktemp(f"console-{request.param}")
    pg_url = (
        await create_scratch_database(PG_ADMIN_URL, "rb_console")
        if request.param == "postgresql"
        else None
    )
    url = pg_url or f"sqlite+aiosqlite:///{home / 'console.db'}"
    settings = Settings.from_env(
        {
            "REPLAYBOOK_HOME": str(home),
            "REPLAYBOOK_DATABASE_URL": url,
            "TEMPORAL_ADDRESS": "127.0.0.1:1",  # nothing here needs Temporal
            "REPLAYBOOK_LOG_FORMAT": "json",
        }
    )
    async with open_stores(settings.stores) as stores:
        world = SimulatedWorld(SqlWorldStore.beside(stores.db.engine.url))
        await world.ensure()
        ids = [
            (await run_scenario(world, stores.ledger, stores.artifacts, "happy", seed=s)).run_id
            for s in range(3)
        ]
    app = create_app(settings, ApiConfig(tokens=TOKENS))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://ui") as client:
        yield client, ids[::-1]
    await app.state.api.close()
    if pg_url is not None:
        await drop_scratch_database(PG_ADMIN_URL, pg_url)


async def test_tokens_cookie_and_csrf(console: tuple[httpx.AsyncClient, list[str]]) -> None:
    client, ids = console
    anonymous = await client.get("/ui/runs")
    assert anonymous.status_code == 303 and anonymous.headers["location"] == (
        "/ui/login?next=/ui/runs"
    )
    wrong = await client.get("/ui/runs", headers={"authorization": "Bearer nope"})
    assert wrong.status_code == 401
    refused = await client.post("/ui/login", data={"token": "nope", "next": "/ui/runs"})
    assert refused.status_code == 401 and "not valid" in refused.text
    # a login goes only to a console page, never off the site
    login = await client.post("/ui/login", data={"token": "eng-ui", "next": "//evil.example/"})
    assert login.headers["location"] == "/ui/runs"
    cookie = login.cookies["rb_token"]
    assert "httponly" in login.headers["set-cookie"].lower()
    client.cookies.clear()  # sent by hand below, as a browser would
    cookies = {"cookie": f"rb_token={cookie}"}
    page = await client.get(f"/ui/runs/{ids[0]}", headers=cookies)
    assert page.status_code == 200 and 'name="csrf"' in page.text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    # a form sent with the cookie but without the page's csrf is refused, nothing started
    forged = await client.post(
        f"/ui/runs/{ids[0]}/incident", data={"counterfactuals": "prompt=v18"}, headers=cookies
    )
    assert forged.status_code == 403 and "csrf" in forged.text
    # with it, the input is checked before any workflow (the field named)
    bad = await client.post(
        f"/ui/runs/{ids[0]}/incident",
        data={"counterfactuals": "prompt", "csrf": csrf.group(1)},
        headers=cookies,
    )
    assert bad.status_code == 422 and "counterfactuals" in bad.text
    # a kind that is no swap: the record's refusal, in its own words, named by the field
    kind = await client.post(
        f"/ui/runs/{ids[0]}/incident",
        data={"counterfactuals": "flavour=v2", "csrf": csrf.group(1)},
        headers=cookies,
    )
    assert kind.status_code == 422, kind.text
    assert "counterfactuals: kind: Input should be &#39;prompt&#39;" in kind.text, kind.text
    assert "errors.pydantic.dev" not in kind.text
    # a viewer may not start anything
    viewer = await client.post(f"/ui/runs/{ids[0]}/replay", data={}, headers=VIEWER)
    assert viewer.status_code == 403 and "engineer" in viewer.text
    confirm = await client.post("/ui/incidents/INC-none/confirm", data={}, headers=VIEWER)
    assert confirm.status_code == 403
    assert "confirming a root cause needs the role forensic or admin" in confirm.text


async def test_runs_are_paged_newest_first_and_filtered(
    console: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, ids = console
    seen: list[str] = []
    path = "/ui/runs?kind=source"
    pages = 0
    while path:
        page = await client.get(path, headers=VIEWER)
        assert page.status_code == 200, page.text
        seen += RUN_LINK.findall(page.text)
        pages += 1
        more = re.search(r'class="next" href="([^"]+)"', page.text)
        path = "/ui/runs" + more.group(1).replace("&amp;", "&") if more else ""
        assert pages <= 5
    assert seen[: len(ids)] == ids  # every run once, newest first, across pages
    assert len(seen) == len(set(seen))
    none = await client.get("/ui/runs?outcome=FAILED&graph=support-desk", headers=VIEWER)
    assert RUN_LINK.findall(none.text) == [] and "No runs match" in none.text
    replays = await client.get("/ui/runs?kind=replay", headers=VIEWER)
    assert RUN_LINK.findall(replays.text) == []
    shown = await client.get("/ui/runs", headers=VIEWER)
    assert re.search(r"CONFIRMED \d", shown.text) and "head intact" in shown.text
    for query, field in (
        ("since=2026-13-01", "since"),
        ("kind=bogus", "kind"),
        ("after=x", "after"),
    ):
        bad = await client.get(f"/ui/runs?{query}", headers=VIEWER)
        assert bad.status_code == 422 and f"<code>{field}</code>" in bad.text, bad.text


async def test_a_small_page_size_pages_by_keyset(
    console: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, ids = console
    first = await client.get("/ui/runs?limit=2", headers=VIEWER)
    assert RUN_LINK.findall(first.text) == ids[:2]
    more = re.search(r'class="next" href="\?([^"]+)"', first.text)
    assert more is not None and "limit=2" in more.group(1)
    second = await client.get("/ui/runs?" + more.group(1).replace("&amp;", "&"), headers=VIEWER)
    assert RUN_LINK.findall(second.text)[:1] == ids[2:3]


async def test_a_model_calls_prompt_and_context(
    console: tuple[httpx.AsyncClient, list[str]],
) -> None:
    client, ids = console
    run = await client.get(f"/ui/runs/{ids[0]}", headers=VIEWER)
    assert "PROMPT_COMPILED" in run.text and "CONTEXT_SNAPSHOT" in run.text
    sequence: dict[str, int] = {}  # the first event of each type
    for n, kind in re.findall(
        r'<tr id="ev-(\d+)"><td>.*?</td><td>.*?</td><td>([A-Z_]+)</td>', run.text
    ):
        sequence.setdefault(kind, int(n))
    prompt = await client.get(
        f"/ui/runs/{ids[0]}/events/{sequence['PROMPT_COMPILED']}", headers=VIEWER
    )
    assert "Compiled prompt" in prompt.text and "System policy" in prompt.text
    context = await client.get(
        f"/ui/runs/{ids[0]}/events/{sequence['CONTEXT_SNAPSHOT']}", headers=VIEWER
    )
    assert "the messages sent" in context.text and "<td>system</td>" in context.text
