"""A human's confirmed failure type is the incident's everywhere (issue 30): the report in
every format, ``signatures``, the ``agent_incident_total`` label, the regression case and the
status view; the automatic classification stays visible, labelled as such."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import REGISTRY

from app.incidents import view_json
from models import FixtureMissPolicy
from models.incident_flow import (
    Counterfactual,
    IncidentPhase,
    IncidentView,
    RootCauseConfirmation,
)
from stores.sql.incidents import SqlIncidentStore
from tests.workflows.test_incident_workflow import open_incident, wait_phase, wrong_customer_run

ROOT = Path(__file__).resolve().parents[2]
REPLAYBOOK = str(Path(sys.executable).parent / "replaybook")


def cli_json(home: Path, *args: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REPLAYBOOK_", "TEMPORAL_"))}
    env |= {"REPLAYBOOK_HOME": str(home), "REPLAYBOOK_LOG_FORMAT": "json"}
    env |= {"REPLAYBOOK_LOCAL_MODELS": "off", "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    done = subprocess.run(
        [REPLAYBOOK, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


async def test_a_confirmed_failure_type_wins_everywhere(replay_stack, replay_home) -> None:
    stack = replay_stack
    run_id = await wrong_customer_run(stack)
    handle = await open_incident(
        stack,
        run_id,
        counterfactuals=(Counterfactual(kind="prompt", value="v18"),),
        repeat=2,
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    assert view.signature is not None
    assert view.signature.failure_type == "DATA"  # what the evidence shows, automatically
    completed_prompt = {"phase": "COMPLETED", "failure_type": "PROMPT"}
    counted = REGISTRY.get_sample_value("agent_incident_total", completed_prompt) or 0.0
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="prompt v17 does not prefer customer_id",
            fix_version="v18",
            verified_by="dana",
            replay_ids=(view.replays[1].replay_id,),
            failure_type="PROMPT",
        ),
    )
    final: IncidentView = await handle.result()
    assert final.phase is IncidentPhase.COMPLETED

    # the report, as the CLI prints it
    report = cli_json(replay_home, "incident", "report", final.incident_id, "--json")["report"]
    assert report["failure_type"] == "PROMPT" and report["failure_type_confirmed"] is True
    assert report["automatic_failure_type"] == "DATA"
    md = (await stack.stores.artifacts.get(final.report_refs["md"])).decode()
    assert "- Failure type: `PROMPT` **(confirmed by a human)**" in md
    assert "- Automatic failure type: `DATA` **(automatic, not a root cause)**" in md
    html = (await stack.stores.artifacts.get(final.report_refs["html"])).decode()
    assert "confirmed by a human" in html and "Automatic failure type" in html

    # the signature groups (other incidents of this signature may be unconfirmed DATA ones)
    groups = cli_json(replay_home, "signatures", "--json")["signatures"]
    (group,) = [g for g in groups if final.incident_id in g["incident_ids"]]
    assert group["failure_type"] == "PROMPT" and group["automatic_failure_type"] == "DATA"
    assert group["confirmed_failure_types"]["PROMPT"] >= 1

    # the metric, the regression case and the status view (CLI and API)
    assert REGISTRY.get_sample_value("agent_incident_total", completed_prompt) == counted + 1
    assert final.regression_case_id is not None
    case = await SqlIncidentStore(stack.stores.db).get_case(final.regression_case_id)
    assert case.failure_type == "PROMPT"
    shown = view_json(final)
    assert shown["failure_type"] == "PROMPT" and shown["automatic_failure_type"] == "DATA"
