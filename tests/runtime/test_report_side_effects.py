"""The report leads with what really happened to each write (issue 20): applied or not, its
status history, the reconciliation and its evidence, the provider's request id and receipt —
in HTML, Markdown and JSON — and accounts for every replay, including one that failed."""

from __future__ import annotations

import json
from datetime import timedelta

from forensics.report import render_html, render_json, render_markdown
from forensics.side_effect_truth import applied_of
from models.enums import ReplayStatus
from models.report_bundle import SideEffectStatusChange, SideEffectTruth
from tests.runtime.test_report import T0, bundle, replay

REFUND = SideEffectTruth(
    side_effect_id="se-refund-1",
    capability_id="payments.refund",
    step_id="refund",
    status="RECONCILED",
    applied=True,
    history=(
        SideEffectStatusChange(status="PLANNED", sequence=7, at=T0),
        SideEffectStatusChange(status="EXECUTING", sequence=8, at=T0),
        SideEffectStatusChange(status="UNKNOWN", sequence=9, at=T0 + timedelta(seconds=30)),
        SideEffectStatusChange(status="RECONCILED", sequence=14, at=T0 + timedelta(hours=1)),
    ),
    reconciliation="RECONCILED: applied",
    evidence="payments-reconciler: applied",
    provider_request_id="preq-0123456789abcdef",
    provider_receipt="refund re_42 applied; found by provider_request_id",
)
WAITING = REFUND.model_copy(
    update={
        "side_effect_id": "se-refund-2",
        "status": "UNKNOWN",
        "applied": None,
        "history": REFUND.history[:3],
        "reconciliation": "UNKNOWN: waiting for a human",
        "evidence": "no reconciler supports payments.refund: a human must decide",
        "provider_receipt": None,
    }
)


def test_every_format_leads_with_whether_the_refund_happened() -> None:
    b = bundle(side_effects=(REFUND, WAITING))
    md = render_markdown(b)
    head = md.split("## Reproduction")[0]
    assert "Side effect payments.refund: **APPLIED**" in head
    assert "**UNKNOWN: not established**" in head and "preq-0123456789abcdef" in head
    section = md.split("## Side effects: what really happened")[1].split("\n## ")[0]
    assert "PLANNED (#7" in section and "UNKNOWN (#9" in section and "RECONCILED (#14" in section
    assert "payments-reconciler: applied" in section and "refund re\\_42" not in section
    assert "refund re_42 applied" in section and "waiting for a human" in section
    # the side effects come before the timeline and the replays
    assert md.index("## Side effects") < md.index("## Timeline") < md.index("## Replays")

    page = render_html(b)
    assert page.index('id="side-effects"') < page.index('id="timeline"')
    assert "APPLIED" in page and "preq-0123456789abcdef" in page and "re_42" in page

    data = json.loads(render_json(b))
    refund = data["side_effects"][0]
    assert refund["applied"] is True and refund["provider_request_id"].startswith("preq-")
    assert [h["status"] for h in refund["history"]][-1] == "RECONCILED"


def test_a_failed_replay_is_accounted_for_and_no_critical_difference_is_explained() -> None:
    b = bundle()
    failed = replay("rp-exact", 4, 5).model_copy(update={"status": ReplayStatus.FAILED})
    report = b.report.model_copy(
        update={"replays": (*b.report.replays, failed), "critical_diffs": ()}
    )
    md = render_markdown(b.model_copy(update={"report": report}))
    head = md.split("## Timeline")[0]
    assert "**FAILED** **4/5 reproduced" in head
    critical = md.split("## Critical differences")[1].split("\n## ")[0]
    assert "None." not in critical
    assert "no critical difference from the source" in critical
    assert "rp-exact FAILED" in critical


def test_the_first_divergence_column_names_the_shown_replays_step() -> None:
    b = bundle()
    report = b.report.model_copy(
        update={
            "replays": tuple(r.model_copy(update={"comparison": None}) for r in b.report.replays)
        }
    )
    assert b.replay is not None
    md = render_markdown(
        b.model_copy(
            update={
                "report": report,
                "replay": b.replay.model_copy(update={"run_id": "rp-v18-000"}),
            }
        )
    )
    rows = md.split("## Replays")[1].split("\n## ")[0]
    v18 = next(line for line in rows.splitlines() if "`rp-v18`" in line)
    v17 = next(line for line in rows.splitlines() if "`rp-v17`" in line)
    assert v18.endswith("`crm` |") and "not compared in this report" in v17
    assert "—" not in rows


def test_applied_follows_the_status() -> None:
    assert applied_of("CONFIRMED", None) is True and applied_of("FAILED", None) is False
    assert applied_of("RECONCILED", False) is False and applied_of("UNKNOWN", None) is None


def test_the_timeline_names_a_phase_once() -> None:
    from models.report_bundle import TimelineEntry

    b = bundle(
        timeline=(
            TimelineEntry(phase="AWAITING_CONFIRMATION", at=T0, detail="waiting for a human"),
            TimelineEntry(phase="AWAITING_CONFIRMATION", at=T0, detail="confirmed by alice"),
        )
    )
    timeline = render_markdown(b).split("## Timeline")[1].split("\n## ")[0]
    assert timeline.count("AWAITING\\_CONFIRMATION") + timeline.count("AWAITING_CONFIRMATION") == 1
