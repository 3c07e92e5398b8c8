"""Deletion of a data subject after an incident, on a real Temporal dev server with real
workers: the freeze refuses it until released, the regenerated report holds no raw personal
data, the chain still verifies, raw reads name the request, and a replay says LIMITED."""

from __future__ import annotations

import re
import uuid

import pytest

from examples.support_desk.providers import CUSTOMERS
from examples.support_desk.spec import run_scenario
from forensics.report import render_html, render_json, render_markdown
from forensics.report_gather import report_bundle
from models import ReplayMode
from models.base import format_instant
from models.enums import FixtureMissPolicy, ReplayConfidence
from models.errors import ContentDestroyedError, EvidenceLockedError
from models.incident_flow import Counterfactual, IncidentPhase, IncidentView, RootCauseConfirmation
from models.privacy import RawEvidenceState
from models.redaction import REDACT_V2, redaction_policy
from models.replay_flow import ReplayPlan, ReplayStatus
from stores.sql.incidents import SqlIncidentStore
from tests.workflows.test_incident_workflow import open_incident, wait_phase, wrong_customer_run

pytestmark = pytest.mark.asyncio(loop_scope="session")

SUBJECT = "customer:C-2002"
SHARED_PHONE = "+1-555-0199"
#: the wrong-customer run involves both customers sharing the phone: none of their e-mails or
#: phone numbers may appear in a report
PERSONAL = sorted(
    {c["email"] for c in CUSTOMERS if c["phone"] == SHARED_PHONE}
    | {SHARED_PHONE, SHARED_PHONE.replace("-", ""), "555-0199", "5550199"}
)


#: … nor their names (the CRM gave the run both records; the e-mail said "Hello Bob", a
#: counterfactual replay reading Carol's record live says "Hello Carol")
NAMES = re.compile(
    "|".join(
        rf"\b{word}\b"
        for c in CUSTOMERS
        if c["phone"] == SHARED_PHONE
        for word in str(c["name"]).split()
    ),
    re.IGNORECASE,
)


def _leaks(text: str) -> list[str]:
    return [needle for needle in PERSONAL if needle in text] + NAMES.findall(text)


async def _raw_sequences(stack, run_id: str) -> list[int]:
    vault = stack.stores.privacy.vault
    out = []
    for event in await stack.stores.ledger.events(run_id):
        meta = await vault.raw_evidence(run_id, event.sequence, decrypt=False)
        if meta.state in (RawEvidenceState.AVAILABLE, RawEvidenceState.DESTROYED):
            out.append(event.sequence)
    return out


async def test_subject_deleted_after_an_incident_leaves_no_personal_data_in_its_report(
    isolated_replay_stack,
) -> None:
    stack = isolated_replay_stack
    privacy = stack.stores.privacy
    assert len(PERSONAL) >= 4 and "bob@example.com" in PERSONAL
    assert NAMES.findall("Hello Carol, hello Bob") == ["Carol", "Bob"]
    run_id = await wrong_customer_run(stack)
    raw_seqs = await _raw_sequences(stack, run_id)
    assert raw_seqs, "the wrong-customer run keeps encrypted raw payloads"
    # the counterfactual reads the CRM live where v18 looks up by id: Carol's record, then
    # "Hello Carol" in its reply, recorded in the replay's run and shown in the report
    handle = await open_incident(
        stack,
        run_id,
        repeat=1,
        counterfactuals=(Counterfactual(kind="prompt", value="v18"),),
        miss_policy=FixtureMissPolicy.SANDBOX_LIVE,
    )
    view = await wait_phase(handle, IncidentPhase.AWAITING_CONFIRMATION)
    await handle.execute_update(
        "confirm_root_cause",
        RootCauseConfirmation(
            root_cause="lookup by phone returned two customers",
            fix_version="v18",
            verified_by="dana",
            replay_ids=(view.replays[0].replay_id,),
        ),
    )
    final: IncidentView = await handle.result()
    assert final.phase is IncidentPhase.COMPLETED and final.regression_case_id

    # the completed incident's freeze still holds the evidence: refused, nothing destroyed
    with pytest.raises(EvidenceLockedError, match=final.incident_id):
        await privacy.delete_subject(SUBJECT, "DSR-held")
    assert await privacy.records.receipt("DSR-held") is None
    meta = await privacy.vault.raw_evidence(run_id, raw_seqs[0], decrypt=False)
    assert meta.state is RawEvidenceState.AVAILABLE

    # releasing the freeze is a deliberate act, allowed once the incident is finished
    assert await privacy.release_freeze(run_id, final.incident_id)
    await privacy.release(run_id)
    assert await privacy.hold_reasons(run_id) == []

    request = f"DSR-{uuid.uuid4().hex[:8]}"
    receipt = await privacy.delete_subject(SUBJECT, request)
    assert run_id in receipt.runs and receipt.data_keys_destroyed >= 1
    assert receipt.raw_payloads_destroyed >= len(raw_seqs)
    assert final.incident_id in receipt.incidents
    assert final.regression_case_id in receipt.regression_cases
    assert (await stack.stores.ledger.verify(run_id)).intact
    at = format_instant(receipt.executed_at)
    for seq in raw_seqs:
        with pytest.raises(ContentDestroyedError) as destroyed:
            await privacy.read_raw_evidence(run_id, seq, actor="ana", reason="DSR check")
        assert f"destroyed by deletion request {request} at {at}" in str(destroyed.value)

    # the report, regenerated after the deletion and as stored by the incident, holds none of
    # the customers' e-mails or phone numbers
    cases = SqlIncidentStore(stack.stores.db)
    bundle = await report_bundle(stack.stores.ledger, stack.stores.evidence, cases, final)
    rendered = {
        "json": render_json(bundle),
        "md": render_markdown(bundle),
        "html": render_html(bundle),
    }
    for fmt, ref in final.report_refs.items():
        rendered[f"stored-{fmt}"] = (await stack.stores.artifacts.get(ref)).decode()
    assert set(rendered) >= {"json", "md", "html", "stored-json", "stored-md", "stored-html"}
    for fmt, text in rendered.items():
        assert run_id in text, fmt  # the report is about this run …
        assert _leaks(text) == [], fmt  # … and carries no raw personal data
    # the sanitized pseudonyms are what the report shows instead
    assert "<email:" in rendered["json"] or "<phone:" in rendered["json"]
    # the replays' runs hold the same people's data: deleting the customer shreds them too
    replay_runs = [r.replay_id for r in final.replays]
    assert replay_runs and set(replay_runs) <= set(receipt.runs)
    # … and what they recorded (the live CRM read, the reply) names nobody either
    carol = redaction_policy(REDACT_V2, (), ["Carol"]).sanitize("Carol")
    recorded = ""
    for replay_id in replay_runs:
        payloads = await stack.stores.ledger.events_with_payloads(replay_id)
        recorded += b"".join(p or b"" for _, p in payloads).decode()
    assert _leaks(recorded) == []
    assert f"Hello {carol}" in recorded  # the counterfactual did greet Carol, pseudonymously


async def test_replay_of_a_run_whose_subject_was_deleted_is_limited_and_says_why(
    isolated_replay_stack,
) -> None:
    stack = isolated_replay_stack
    result = await run_scenario(
        stack.world, stack.stores.ledger, stack.stores.artifacts, "happy", seed=1
    )
    before = await stack.replay(
        ReplayPlan(
            replay_id=f"replay-{uuid.uuid4().hex[:8]}",
            source_run_id=result.run_id,
            mode=ReplayMode.RECORDED,
        )
    )
    assert before.confidence is ReplayConfidence.FULL
    request = f"DSR-{uuid.uuid4().hex[:8]}"
    receipt = await stack.stores.privacy.delete_subject("customer:C-1001", request)
    assert result.run_id in receipt.runs and receipt.raw_payloads_destroyed > 0

    after = await stack.replay(
        ReplayPlan(
            replay_id=f"replay-{uuid.uuid4().hex[:8]}",
            source_run_id=result.run_id,
            mode=ReplayMode.RECORDED,
        )
    )
    assert after.status is ReplayStatus.COMPLETED
    assert after.confidence is ReplayConfidence.LIMITED
    # why: the completeness line names the deletion request and its time
    why = after.completeness
    assert (
        f"destroyed by deletion request {request} at {format_instant(receipt.executed_at)}" in why
    )
    assert "sanitized view only" in why
    assert after.reproduced  # replayed from the sanitized view, the behaviour is the same
