"""The web console in a real browser (Debian's chromium, driven by Playwright) against a real
stack: the session's Temporal dev server and workers (tests/fixtures_replay.py) and the API
served by uvicorn. List → run → verify → replay diff → incident → confirm by the form (a
refused confirmation shown with its reason first) → the incident reaches COMPLETED; a viewer
cannot open raw evidence; a tampered run shows "broken at sequence K".

Screenshots of each page go to ``$REPLAYBOOK_UI_SCREENSHOTS`` when set (``docs/ui/`` holds
the committed ones), else to the test's temporary directory."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import uvicorn
from playwright.async_api import Browser, Page, async_playwright, expect
from sqlalchemy import text

from api import create_app
from api.auth import Grant, Role, fingerprint
from api.config import ApiConfig
from app.capsules import list_cases
from app.incidents import retire_case
from app.privacy import audit_log
from devstack.ports import free_ports
from examples.support_desk.spec import run_scenario
from tests.fixtures_replay import ReplayStack

pytestmark = pytest.mark.asyncio(loop_scope="session")

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKENS = {
    "tok-viewer-ui": Grant({Role.VIEWER}),
    "tok-ops-ui": Grant({Role.ENGINEER, Role.FORENSIC}, "dana"),
}
TEMPORAL_UI = "http://temporal-ui.invalid:8233"
#: how long a replay or an incident may take on a loaded 2-core machine
SLOW_MS = 240_000


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def console(replay_stack: ReplayStack) -> AsyncIterator[str]:
    """The API (and its console) over the session's stack, served on a free port."""
    app = create_app(replay_stack.settings, ApiConfig(tokens=dict(TOKENS)))
    # the session's Temporal server runs headless: a Web UI address for the links alone
    app.state.console_temporal_ui = TEMPORAL_UI
    (port,) = free_ports(1)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.create_task(server.serve())
    while not server.started:
        assert not serving.done(), "the API did not start"
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await serving


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = os.environ.get("REPLAYBOOK_UI_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("ui-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


async def logged_in(browser: Browser, console: str, token: str) -> Page:
    page = await (await browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
    await page.goto(f"{console}/ui/runs")
    await expect(page).to_have_url(re.compile(r"/ui/login"))  # no token: the login form
    await page.fill("input[name=token]", token)
    await page.click('form[action="/ui/login"] button')
    await expect(page.locator("h1")).to_have_text("Runs")
    return page


async def wrong_customer_run(stack: ReplayStack, wrong: bool = True) -> str:
    """A run of the scenario that emailed the wrong customer (or, ``wrong=False``, the
    right one)."""
    for seed in range(30):
        result = await run_scenario(
            stack.world, stack.stores.ledger, stack.stores.artifacts, "wrong-customer", seed=seed
        )
        if (result.outcome["emailed"] == "bob@example.com") == wrong:
            return result.run_id
    raise AssertionError(f"no run emailed the {'wrong' if wrong else 'right'} customer")


async def test_list_run_replay_incident_confirm(
    replay_stack: ReplayStack, console: str, browser: Browser, shots: Path
) -> None:
    run_id = await wrong_customer_run(replay_stack)
    page = await logged_in(browser, console, "tok-ops-ui")
    await page.screenshot(path=shots / "runs.png", full_page=True)

    # list → run: the evidence timeline, verified intact
    await page.click(f"text={run_id}")
    await expect(page.locator("h1")).to_contain_text(run_id)
    await expect(page.locator("table.timeline")).to_contain_text("MODEL_CALL")
    await page.click("#verify")
    await expect(page.locator("#verify-outcome")).to_have_text(re.compile(r"^intact"))
    await page.screenshot(path=shots / "run.png", full_page=True)

    # replay: an EXACT replay started from the form, followed live, then its diff
    await page.click("text=Replay…")
    await page.select_option("select[name=mode]", "EXACT")
    await page.click("#start-replay")
    await expect(page).to_have_url(re.compile(r"/ui/replays/replay-"))
    await expect(page.locator("#replay-status")).to_have_text("COMPLETED", timeout=SLOW_MS)
    await expect(page.locator("#verdict")).to_contain_text("REPRODUCED")
    replay_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    namespace = replay_stack.settings.temporal.namespace
    await expect(page.get_by_role("link", name="Temporal Web UI")).to_have_attribute(
        "href", f"{TEMPORAL_UI}/namespaces/{namespace}/workflows/{replay_id}"
    )
    await expect(page.locator("table.side-by-side")).to_contain_text("crm.find_by_phone")
    await page.screenshot(path=shots / "replay.png", full_page=True)
    await page.check("#collapse-equal")  # an exact replay: every step equal, all collapsed
    await expect(page.locator("table.side-by-side")).to_have_class(re.compile("collapsed"))
    await expect(page.locator("table.side-by-side tbody tr").first).to_be_hidden()

    # incident: opened from the run page, awaiting the human
    await page.goto(f"{console}/ui/runs/{run_id}")
    await page.click("text=Open incident…")
    await page.fill("input[name=counterfactuals]", "prompt=v18")
    await page.fill("form[action$=incident] input[name=repeat]", "2")
    await page.click("#open-incident")
    await expect(page).to_have_url(re.compile(r"/ui/incidents/"))
    phase = page.locator("#incident-phase")
    await expect(phase).to_have_text("AWAITING_CONFIRMATION", timeout=SLOW_MS)
    await expect(page.get_by_role("cell", name="prompt=v18")).to_be_visible()
    # the side effects' truth: the wrong customer's email was sent (applied)
    truth = page.locator("tr", has_text="email.send")
    await expect(truth).to_contain_text("applied")
    await expect(truth).to_contain_text("PLANNED → EXECUTING → CONFIRMED")

    # the workflow refuses a cause resting on the v18 replays (a fixture miss each: no
    # conclusive run); the page shows its reason and keeps what was typed
    cause = "prompt v17 searches by phone; duplicate numbers returned the wrong customer"
    await page.fill("textarea[name=root_cause]", cause)
    await page.fill("input[name=fix_version]", "v18")
    await page.fill("input[name=verified_by]", "dana")
    async with page.expect_navigation():
        await page.click("#confirm")
    rejection = page.locator("#rejection")
    await expect(rejection).to_contain_text("has no conclusive run")
    await expect(rejection).to_contain_text("prompt=v18")
    await expect(page.locator("input[name=fix_version]")).to_have_value("v18")
    await page.screenshot(path=shots / "incident.png", full_page=True)

    # resting it on the exact replays only: accepted, and the incident goes on to COMPLETED
    v18 = page.locator("fieldset label", has_text="prompt=v18").locator("input")
    await v18.uncheck()
    async with page.expect_navigation():
        await page.click("#confirm")
    assert await rejection.count() == 0, await rejection.inner_text()
    await expect(phase).to_have_text("COMPLETED", timeout=SLOW_MS)
    await expect(page.locator("#root-cause")).to_contain_text("prompt v17 searches by phone")
    await page.screenshot(path=shots / "incident-completed.png", full_page=True)

    incident_id = page.url.rstrip("/").rsplit("/", 1)[-1]
    await page.click("text=HTML report")  # the report, and from it back to the console
    await expect(page.locator("h1")).to_contain_text("DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT")
    await page.click("text=this incident in the Replaybook console")
    await expect(phase).to_have_text("COMPLETED")

    # two runs compared: the first divergence marked, the next difference one click away
    right = await wrong_customer_run(replay_stack, wrong=False)
    await page.goto(f"{console}/ui/compare?a={run_id}&b={right}")
    await expect(page.locator("tr#first-divergence")).to_be_visible()
    await page.click("#next-difference")
    await expect(page.locator("tr.current-difference")).to_have_count(1)
    await page.screenshot(path=shots / "compare.png", full_page=True)

    await page.goto(f"{console}/ui/cases")
    await expect(page.locator("table")).to_contain_text(incident_id)  # its regression case
    await page.goto(f"{console}/ui/incidents")
    await expect(page.locator("tr", has_text=incident_id)).to_contain_text("COMPLETED")
    await page.goto(f"{console}/ui/runs/{run_id}")  # the run names its incidents
    await expect(page.locator("table.incidents")).to_contain_text(incident_id)
    for name, path in (("cases", "/ui/cases"), ("slo", "/ui/slo"), ("incidents", "/ui/incidents")):
        await page.goto(f"{console}{path}")
        await expect(page.locator("table").first).to_be_visible()
        await page.screenshot(path=shots / f"{name}.png", full_page=True)
    # retired: the session's other tests gate every active case of this stack
    for case in await list_cases(replay_stack.stores):
        if case["incident_id"] == incident_id:
            await retire_case(replay_stack.stores, case["case_id"], "console browser test")


async def test_a_viewer_cannot_open_raw_evidence(
    replay_stack: ReplayStack, console: str, browser: Browser, shots: Path
) -> None:
    result = await run_scenario(
        replay_stack.world,
        replay_stack.stores.ledger,
        replay_stack.stores.artifacts,
        "happy",
        seed=3,
    )
    page = await logged_in(browser, console, "tok-viewer-ui")
    await page.goto(f"{console}/ui/runs/{result.run_id}/events/5")
    await expect(page.locator("h1")).to_contain_text("Sanitized event 5")
    await page.fill("input[name=reason]", "curious")
    async with page.expect_response(re.compile(r"/raw\?")) as answer:
        await page.click("#read-raw")
    assert (await answer.value).status == 403
    await expect(page.locator(".rejected")).to_contain_text("forensic")
    await expect(page.locator("body")).not_to_contain_text("raw_state")
    await page.screenshot(path=shots / "raw-refused.png", full_page=True)
    # the refusal is audited as GET …/raw's is: who tried, on what, why
    refused = [
        a
        for a in await audit_log(replay_stack.stores)
        if a["run_id"] == result.run_id and a["reason"] == "curious"
    ]
    assert [(a["actor"], a["sequence"]) for a in refused] == [
        ("api:token:" + fingerprint("tok-viewer-ui"), 5)
    ]
    assert refused[0]["outcome"] == "DENIED", refused


async def test_a_tampered_run_shows_where_it_breaks(
    replay_stack: ReplayStack, console: str, browser: Browser
) -> None:
    result = await run_scenario(
        replay_stack.world,
        replay_stack.stores.ledger,
        replay_stack.stores.artifacts,
        "happy",
        seed=4,
    )
    edit = "UPDATE execution_events SET step_id=:s WHERE run_id=:r AND sequence=4"
    engine = replay_stack.stores.db.engine
    row = "SELECT step_id FROM execution_events WHERE run_id=:r AND sequence=4"
    async with engine.begin() as conn:
        original = (await conn.execute(text(row), {"r": result.run_id})).scalar_one()
        await conn.execute(text(edit), {"s": "forged", "r": result.run_id})
    try:
        page = await logged_in(browser, console, "tok-viewer-ui")
        await page.goto(f"{console}/ui/runs/{result.run_id}")
        await page.click("#verify")
        await expect(page.locator("#verify-outcome")).to_have_text(
            re.compile(r"^broken at sequence 4\b")
        )
    finally:
        async with engine.begin() as conn:
            await conn.execute(text(edit), {"s": original, "r": result.run_id})
