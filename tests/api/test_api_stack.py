"""The API as served by ``replaybook dev up`` (real Temporal dev server, real worker, real
PostgreSQL): a full replay and a full incident over HTTP, roles enforced, and schemathesis
finding no 5xx anywhere in /openapi.json."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable

from devstack.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")
TOKENS = {"viewer": "tok-viewer-1", "engineer": "tok-engineer-1", "forensic": "tok-forensic-1"}


class Stack:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.status: dict[str, Any] = {}

    def cli(self, *args: str, code: int = 0) -> Any:
        result = subprocess.run(
            [REPLAYBOOK, *args], capture_output=True, text=True, env=self.env, cwd=ROOT, timeout=120
        )
        assert result.returncode == code, result.stdout + result.stderr
        return json.loads(result.stdout) if "--json" in args else result.stdout

    @property
    def url(self) -> str:
        return self.status["api_url"]

    def http(self, role: str) -> httpx.Client:
        token = self.status["dev_token"] if role == "admin" else TOKENS[role]
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("api-stack")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("REPLAYBOOK_", "AWS_", "TEMPORAL_"))
    } | {
        "REPLAYBOOK_HOME": str(home),
        "REPLAYBOOK_LOG_FORMAT": "json",
        "REPLAYBOOK_LOCAL_MODELS": "off",  # tested in tests/models
        "REPLAYBOOK_DATABASE_URL": postgres_url,
        "REPLAYBOOK_API_TOKENS": ",".join(f"{t}={role}" for role, t in TOKENS.items()),
        # the CLI (a console script) runs this checkout's code, as the worker and the API do
        # (``python -m`` from ROOT): installed from another checkout (a worktree sharing a
        # venv), its runs would record that checkout's source manifest, and every replay of
        # them would be LIMITED for source drift
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    stack = Stack(home, env)
    port, ui_port = free_ports(2)
    stack.cli("dev", "up", "--temporal-port", str(port), "--ui-port", str(ui_port), "--json")
    try:
        stack.status = stack.cli("dev", "status", "--json")
        yield stack
    finally:
        stack.cli("dev", "down")


def poll(
    fetch: Callable[[], dict[str, Any]],
    done: Callable[[dict[str, Any]], bool],
    what: str,
    deadline_s: float = 180,
) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        view = fetch()
        if done(view):
            return view
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {view}")


def wrong_customer_run(stack: Stack) -> str:
    for seed in range(20):
        view = stack.cli(
            "agent",
            "run",
            "support-desk",
            "--scenario",
            "wrong-customer",
            "--seed",
            str(seed),
            "--json",
        )
        if view["outcome"]["emailed"] == "bob@example.com":
            return str(view["run_id"])
    raise AssertionError("no run emailed the wrong customer")


def test_dev_status_shows_the_api_and_the_worker_metrics_port(stack: Stack) -> None:
    status = stack.status
    assert status["running"] is True and status["components"]["api"]["alive"] is True
    assert status["api_url"] == f"http://127.0.0.1:{status['api_port']}"
    assert len(status["dev_token"]) >= 32 and isinstance(status["worker_metrics_port"], int)
    with stack.http("admin") as admin:
        assert admin.get("/api/runs").status_code == 200  # the dev token is an admin's
    assert httpx.get(f"{stack.url}/api/runs").status_code == 401
    assert httpx.get(f"{stack.url}/metrics").status_code == 200


def test_dev_status_names_the_console_and_it_lists_the_runs(stack: Stack) -> None:
    run_id = stack.cli("agent", "run", "support-desk", "--scenario", "happy", "--json")["run_id"]
    assert stack.status["ui_url"] == f"{stack.url}/ui/"
    with stack.http("admin") as admin:
        page = admin.get(f"{stack.status['ui_url']}runs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert f'href="/ui/runs/{run_id}"' in page.text
    with httpx.Client(base_url=stack.url) as anonymous:  # a browser without a token: log in
        assert anonymous.get("/ui/runs").headers["location"].startswith("/ui/login")
    assert f"console {stack.url}/ui/" in stack.cli("dev", "status")


def test_side_effect_retry_over_http_is_refused_unless_proved_not_applied(stack: Stack) -> None:
    view = stack.cli(
        "agent", "run", "support-desk", "--scenario", "refund-timeout", "--seed", "3", "--json"
    )
    (effect,) = view["side_effects"]
    path = f"/api/side-effects/{effect['id']}/retry"
    with stack.http("engineer") as engineer:
        assert engineer.post(path).status_code == 403
    with stack.http("forensic") as forensic:
        refused = forensic.post(path)
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "reconciliation_required"
        missing = forensic.post("/api/side-effects/se-nope/retry")
        assert missing.status_code == 404 and missing.json()["field"] == "side_effect_id"
    audit = stack.cli("audit", "--json")
    assert effect["id"] not in json.dumps(audit)


def test_a_full_replay_over_http(stack: Stack) -> None:
    run_id = wrong_customer_run(stack)
    with stack.http("engineer") as eng, stack.http("viewer") as viewer:
        assert viewer.get(f"/api/runs/{run_id}/verify").json()["intact"] is True
        started = eng.post(
            "/api/replays",
            json={
                "sourceRunId": run_id,
                "mode": "PROMPT_SWAP",
                "candidatePromptVersion": "v18",
                "fixtureMissPolicy": "SANDBOX_LIVE",
                "repeat": 3,
                "budget": {"maxModelCalls": 20, "maxCost": 3.0},
            },
        )
        assert started.status_code == 202, started.text
        assert started.json()["status"] == "QUEUED"
        replay_id = started.json()["replayId"]
        done = poll(
            lambda: viewer.get(f"/api/replays/{replay_id}").json(),
            lambda v: v["status"] in ("COMPLETED", "FAILED", "CANCELED"),
            "the replay",
        )
        assert done["status"] == "COMPLETED", done
        assert done["mode"] == "PROMPT_SWAP"
        assert done["summary"]["runs"] == 3 and done["summary"]["reproduced"] == 0
        assert len(done["children"]) == 3
        child = viewer.get(f"/api/replays/{done['children'][0]['replayId']}").json()
        assert child["comparison"]["sameSideEffects"] is False
        assert child["comparison"]["critical"] is True  # the email goes to another customer
        assert child["writesExecuted"] == 0 and child["confidence"] == "FULL"

        # a finished replay cannot be cancelled; a running one can
        late = eng.post(f"/api/replays/{replay_id}/cancel")
        assert late.status_code == 409 and late.json()["field"] == "replay_id"
        long = eng.post(
            "/api/replays", json={"sourceRunId": run_id, "mode": "EXACT", "repeat": 200}
        ).json()["replayId"]
        assert viewer.post(f"/api/replays/{long}/cancel").status_code == 403
        cancelled = eng.post(f"/api/replays/{long}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        assert cancelled.json() == {"replayId": long, "status": "CANCEL_REQUESTED"}
        ended = poll(
            lambda: viewer.get(f"/api/replays/{long}").json(),
            lambda v: v["status"] in ("COMPLETED", "FAILED", "CANCELED"),
            "the cancelled replay",
        )
        assert ended["status"] == "CANCELED"


def test_the_seeds_prompt_swap_from_a_step_over_http(stack: Stack) -> None:
    """The seed's own request example (issue 16): a prompt swap from a step is a fork with
    the new prompt, accepted and run through the API, Temporal and the worker; the step named
    is the first one regenerated (issue 30). With the seed's default miss policy (FAIL) the
    v18 planner's lookup by customer_id was never recorded (INCONCLUSIVE, FIXTURE_MISS): READs
    answered live in the sandbox show it no longer reproduces."""
    from examples.support_desk.agent import PROMPTS

    run_id = wrong_customer_run(stack)
    with stack.http("engineer") as eng, stack.http("viewer") as viewer:
        started = eng.post(
            "/api/replays",
            json={
                "sourceRunId": run_id,
                "mode": "PROMPT_SWAP",
                "candidatePromptVersion": "v18",
                "startFromStep": "planner",
                "fixtureMissPolicy": "SANDBOX_LIVE",
                "budget": {"maxModelCalls": 5, "maxCost": 1.0},
            },
        )
        assert started.status_code == 202, started.text
        replay_id = started.json()["replayId"]
        done = poll(
            lambda: viewer.get(f"/api/replays/{replay_id}").json(),
            lambda v: v["status"] in ("COMPLETED", "FAILED", "CANCELED"),
            "the prompt swap from a step",
        )
        assert done["status"] == "COMPLETED" and done["mode"] == "PROMPT_SWAP", done
        assert done["verdict"] == "NOT_REPRODUCED", done["verdictReason"]
        assert done["manifest"]["promptBundleHash"] == PROMPTS["v18"].bundle_hash()
        assert done["budgetUsed"]["modelCalls"] <= 5 and done["writesExecuted"] == 0

        # the fork regenerates the planner (the named step), with a model call, and what
        # follows it
        def events(run: str) -> list[dict[str, Any]]:
            return list(viewer.get(f"/api/runs/{run}").json()["events"])

        def started_steps(run: str) -> list[str]:
            return [e["step_id"] for e in events(run) if e["type"] == "STEP_STARTED"]

        replayed, recorded = started_steps(replay_id), started_steps(run_id)
        assert recorded[0] == "planner" and replayed[0] == "planner"
        assert done["stepsExecuted"] == len(replayed)
        calls = [e for e in events(replay_id) if e["type"] == "MODEL_CALL"]
        assert any(e["step_id"] == "planner" for e in calls)


def test_a_full_incident_over_http(stack: Stack) -> None:
    run_id = wrong_customer_run(stack)
    with stack.http("engineer") as eng, stack.http("forensic") as forensic:
        opened = eng.post(
            "/api/incidents",
            json={
                "sourceRunId": run_id,
                "counterfactuals": [{"kind": "prompt", "value": "v18"}],
                "repeat": 4,
                "fixtureMissPolicy": "SANDBOX_LIVE",
            },
        )
        assert opened.status_code == 202, opened.text
        incident_id = opened.json()["incidentId"]
        view = poll(
            lambda: eng.get(f"/api/incidents/{incident_id}").json(),
            lambda v: v.get("phase") in ("AWAITING_CONFIRMATION", "FAILED"),
            "the incident to wait for confirmation",
        )
        assert view["phase"] == "AWAITING_CONFIRMATION", view
        assert view["signature"] == "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
        assert [r["label"] for r in view["replays"]] == ["exact", "prompt=v18"]
        assert view["replays"][1]["reproduced"] == 0 and view["replays"][1]["runs"] == 4
        assert [p["kind"] for p in view["pending"]] == ["confirm_root_cause"]

        premature = eng.get(f"/api/incidents/{incident_id}/report", params={"format": "md"})
        assert premature.status_code == 409 and "no report yet" in premature.json()["message"]
        nothing_pending = forensic.post(
            f"/api/incidents/{incident_id}/side-effects/se-nope/resolution",
            json={"outcome": "applied", "evidence": "provider says so", "resolvedBy": "dana"},
        )
        assert nothing_pending.status_code == 409
        assert nothing_pending.json()["field"] == "side_effect_id"

        cause = {
            "rootCause": "prompt v17 prefers phone lookups; duplicate phone numbers",
            "fixVersion": "v18",
            "verifiedBy": "dana",
        }
        url = f"/api/incidents/{incident_id}/root-cause"
        assert eng.post(url, json=cause).status_code == 403  # engineers do not confirm causes
        empty = forensic.post(url, json=cause | {"rootCause": ""})
        assert empty.status_code == 422 and empty.json()["field"] == "rootCause"
        foreign = forensic.post(url, json=cause | {"replayIds": ["replay-not-ours"]})
        assert foreign.status_code == 409 and foreign.json()["field"] == "replayIds"
        confirmed = forensic.post(url, json=cause)
        assert confirmed.status_code == 200, confirmed.text
        assert confirmed.json()["verifiedBy"] == "dana" and len(confirmed.json()["replayIds"]) == 2
        again = forensic.post(url, json=cause)
        assert again.status_code == 409 and again.json()["field"] == "incident_id"
        assert (
            "AWAITING_CONFIRMATION" in again.json()["message"]
            or "already" in again.json()["message"]
        )

        final = poll(
            lambda: eng.get(f"/api/incidents/{incident_id}").json(),
            lambda v: v["phase"] in ("COMPLETED", "FAILED"),
            "the incident to complete",
        )
        assert final["phase"] == "COMPLETED" and final["regressionCaseId"]
        assert final["confirmation"]["verifiedBy"] == "dana"

        report = eng.get(f"/api/incidents/{incident_id}/report", params={"format": "json"})
        assert report.headers["content-type"] == "application/json"
        assert report.json()["report"]["incident_id"] == incident_id
        page = eng.get(f"/api/incidents/{incident_id}/report", params={"format": "html"})
        assert page.headers["content-type"].startswith("text/html")
        assert "prompt v17 prefers phone lookups" in page.text and "<script" not in page.text
        md = eng.get(f"/api/incidents/{incident_id}/report", params={"format": "md"})
        assert md.headers["content-type"].startswith("text/markdown") and incident_id in md.text
    # the CLI sees the same incident
    assert stack.cli("incident", "status", incident_id, "--json")["phase"] == "COMPLETED"


def test_no_server_errors_anywhere_in_the_schema(stack: Stack) -> None:
    """schemathesis (its Python API; its pytest plugin does not load under pytest 9) generates
    requests for every operation of the served /openapi.json, valid and invalid ones, as an
    admin: none may get a 5xx, and every 4xx must name the field and the problem."""
    api = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    token = {"Authorization": f"Bearer {stack.status['dev_token']}"}
    operations = [result.ok() for result in api.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) >= 12
    seen: set[tuple[str, int]] = set()
    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    for operation, mode in itertools.product(operations, modes):

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=15,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        def no_5xx(case: Any) -> None:
            response = case.call(headers=token, timeout=60)
            seen.add((f"{case.method} {case.operation.path}", response.status_code))
            assert response.status_code < 500, (case.method, case.formatted_path, response.text)
            if response.status_code >= 400 and response.status_code != 405:
                body = response.json()
                assert body["field"] and body["message"], body

        try:
            no_5xx()
        except Unsatisfiable:
            # nothing to make invalid (GET /api/health has no parameters)
            assert mode is schemathesis.GenerationMode.NEGATIVE and not operation.path_parameters
    # the fuzzing reached the handlers, not only the validation in front of them
    assert any(status in (200, 202) for _, status in seen)
    assert any(status == 404 for _, status in seen) and any(status == 422 for _, status in seen)
