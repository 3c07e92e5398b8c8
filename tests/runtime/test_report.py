"""The incident report renderers (pure): JSON, Markdown and the single-file HTML page."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
from pydantic import ValidationError

from forensics.report import NOT_CONFIRMED, render_html, render_json, render_markdown
from models.canonical import canonical_hash
from models.comparison import compare_trajectories
from models.enums import (
    AgentFailureType,
    DiffType,
    EvidenceType,
    ReplayConfidence,
    ReplayMode,
    ReplayStatus,
)
from models.errors import ConfigurationError
from models.incident import EvidenceRef, FailureForensicsReport
from models.regression import ArgumentConstraint, ForbiddenSideEffect, RegressionCase
from models.replay import ReplayResult, TrajectoryDiff
from models.report_bundle import FailureSummary, PendingTask, ReportBundle, TimelineEntry
from models.signatures import FailureClassification
from models.statistics import wilson_interval
from models.trajectory import ModelDecision, SideEffectFact, ToolCallFact, Trajectory
from worker.settings import Settings

XSS = "<script>alert(1)</script>"
T0 = datetime(2025, 3, 4, 3, 0, tzinfo=UTC)
SIGNATURE = "DATA_NONUNIQUE_LOOKUP_WRONG_RECIPIENT"
CAUSE = "prompt v17 does not prefer customer_id; the model searched by phone"

# builders -----------------------------------------------------------------------------------


def decision(step: str, name: str, args: dict[str, Any]) -> ModelDecision:
    return ModelDecision(step_id=step, tool_names=(name,), argument_hashes=(canonical_hash(args),))


def tool(step: str, name: str, args: dict[str, Any], write: bool = False) -> ToolCallFact:
    return ToolCallFact(
        step_id=step,
        capability_id=name,
        request_hash=canonical_hash({"name": name, "arguments": args}),
        arguments=args,
        outcome="SUCCESS",
        side_effect_class="WRITE" if write else "READ",
    )


def run(run_id: str, lookup: tuple[str, dict[str, Any]], to: str, status: str) -> Trajectory:
    email = {"to": to, "body": f"Hello, about your invoice {XSS}"}
    return Trajectory(
        run_id=run_id,
        steps=("planner", "search", "crm", "email"),
        model_decisions=(
            decision("planner", "kb.search", {"query": "invoice"}),
            decision("crm", *lookup),
            ModelDecision(step_id="email", tool_names=("email.send",), content="Done."),
        ),
        tool_calls=(
            tool("search", "kb.search", {"query": "invoice"}),
            tool("crm", *lookup),
            tool("email", "email.send", email, write=True),
        ),
        side_effects=(
            SideEffectFact(
                step_id="email",
                capability_id="email.send",
                action_hash=canonical_hash(email),
                arguments=email,
                status=status,
            ),
        ),
        outcome={"emailed": to},
        final_answer="Done.",
    )


SOURCE = run("run-src", ("crm.find_by_phone", {"phone": XSS}), "bob@example.com", "CONFIRMED")
REPLAY = run("run-v18", ("crm.get_customer", {"customer_id": "C-2002"}), "carol@x.com", "BLOCKED")
COMPARISON = compare_trajectories(SOURCE, REPLAY)
H = "sha256:" + "ab" * 32


def replay(replay_id: str, reproduced: int, runs: int, **kw: Any) -> ReplayResult:
    return ReplayResult(
        replay_id=replay_id,
        mode=kw.pop("mode", ReplayMode.PROMPT_SWAP),
        status=ReplayStatus.COMPLETED,
        confidence=kw.pop("confidence", ReplayConfidence.FULL),
        reproduced=reproduced,
        runs=runs,
        rate=reproduced / runs,
        **kw,
    )


def case() -> RegressionCase:
    where = (ArgumentConstraint(field="to", op="not_equal", value="carol@x.com"),)
    return RegressionCase(
        case_id="case-1",
        incident_id="inc-1",
        source_run_id="run-src",
        created_at=T0,
        description="email only the customer asked about",
        assertions=(ForbiddenSideEffect(capability_id="email.send", where=where),),
    )


def bundle(confirmed: bool = True, **update: Any) -> ReportBundle:
    critical = [d for d in COMPARISON.diffs if d.critical]
    report = FailureForensicsReport(
        incident_id="inc-1",
        source_run_id="run-src",
        failure_signature=SIGNATURE,
        evidence=(EvidenceRef(type=EvidenceType.EVENT, ref="run-src/events", content_hash=H),),
        replays=(
            replay("rp-v17", 50, 50, comparison=COMPARISON.model_copy(update={"diffs": ()})),
            replay("rp-v18", 0, 50, comparison=COMPARISON),
        ),
        critical_diffs=tuple(critical),
        confirmed_root_cause=CAUSE if confirmed else None,
        fix_version="prompt-v18" if confirmed else None,
        verified_by="alice" if confirmed else None,
        generated_at=T0 + timedelta(hours=2),
    )
    classification = FailureClassification(
        failure_type=AgentFailureType.DATA,
        signature=SIGNATURE,
        key=SIGNATURE + ":00000000",
        explanation="a write went to the wrong match (crm.find_by_phone(phone)->email.send.to)",
    )
    data: dict[str, Any] = {
        "report": report,
        "source": SOURCE,
        "replay": REPLAY,
        "comparison": COMPARISON,
        "replay_labels": {"rp-v17": "prompt=v17 ×50", "rp-v18": "prompt=v18 ×50"},
        "timeline": (
            TimelineEntry(phase="FREEZING", at=T0, detail="42 events frozen"),
            TimelineEntry(phase="REPLAYING", at=T0 + timedelta(minutes=3)),
        ),
        "classification": FailureSummary.of(classification),
        "regression_case_ids": ("case-1",) if confirmed else (),
        "regression_cases": (case(),) if confirmed else (),
        "pending": ()
        if confirmed
        else (
            PendingTask(
                kind="CONFIRM_ROOT_CAUSE",
                detail="cite a replay",
                command="replaybook incident confirm inc-1 --root-cause TEXT",
            ),
        ),
    }
    return ReportBundle.model_validate({**data, **update})


class Page(HTMLParser):
    """Checks nesting while collecting elements: (tag, attrs, text inside)."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "wbr"})

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.elements: list[tuple[str, dict[str, str | None], str]] = []
        self.errors: list[str] = []
        self.feed(text)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed: {[t for t, _, _ in self.stack]}")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            self.elements.append((tag, dict(attrs), ""))
        else:
            self.stack.append((tag, dict(attrs), []))

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1][0] if self.stack else 'nothing'}")
            return
        name, attrs, text = self.stack.pop()
        self.elements.append((name, attrs, "".join(text)))
        if self.stack:  # the parent's text holds its children's, cells apart
            self.stack[-1][2].extend([*text, " " if name in ("td", "th", "li", "dd") else ""])

    def handle_data(self, data: str) -> None:
        if self.stack:
            self.stack[-1][2].append(data)

    def find(self, tag: str, **attrs: str) -> list[tuple[dict[str, str | None], str]]:
        return [
            (a, text)
            for t, a, text in self.elements
            if t == tag and all(a.get(k) == v for k, v in attrs.items())
        ]


def side_by_side(html: str) -> Page:
    """The side-by-side section alone."""
    start = html.index('<section id="side-by-side">')
    return Page(html[start : html.index("</section>", start) + len("</section>")])


def step_column(html: str) -> list[str]:
    page = side_by_side(html)
    return [text.split()[0] for _, text in page.find("tr")[1:]]


# JSON ---------------------------------------------------------------------------------------


def test_json_round_trips_and_is_stable() -> None:
    b = bundle()
    text = render_json(b)
    assert text == render_json(ReportBundle.model_validate_json(text))
    assert ReportBundle.model_validate_json(text) == b
    data = json.loads(text)
    assert text == json.dumps(data, ensure_ascii=False, sort_keys=True, indent=2) + "\n"
    assert list(data) == sorted(data)
    assert data["report"]["failure_signature"] == SIGNATURE
    # equal bundles built in another order render identically
    assert render_json(bundle()) == text


# Markdown -----------------------------------------------------------------------------------


def test_markdown_leads_with_the_headline_facts() -> None:
    md = render_markdown(bundle())
    head = md.split("## Timeline")[0]
    for fact in ("inc-1", SIGNATURE, "run-src", "prompt-v18", "alice", "DATA"):
        assert fact in head
    assert "**Confirmed root cause** (by a human)" in head and "customer_id" in head
    assert "50/50 reproduced" in head and "0/50 reproduced (0%, 95% CI 0.0%–7.1%)" in head
    assert "first divergence: step `crm`" in md.lower()
    assert H in md and "`case-1`" in md and "no email.send where to not_equal" in md
    assert NOT_CONFIRMED not in md
    marked = [line for line in md.splitlines() if "first divergence**" in line]
    assert len(marked) == 1 and marked[0].startswith("| **⚑ first divergence** `crm` |")


def test_markdown_says_not_confirmed_and_escapes_evidence() -> None:
    md = render_markdown(bundle(confirmed=False))
    assert NOT_CONFIRMED in md and "Confirmed root cause" not in md
    assert "`CONFIRM_ROOT_CAUSE`" in md and "replaybook incident confirm inc-1" in md
    # raw HTML from evidence never reaches the Markdown outside a code span
    outside_code = "".join(md.split("`")[::2])
    assert "\\<script\\>" in outside_code and re.search(r"(?<!\\)<script", outside_code) is None


# HTML ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("confirmed", [True, False])
def test_html_is_well_formed_self_contained_and_scriptless(confirmed: bool) -> None:
    text = render_html(bundle(confirmed=confirmed))
    page = Page(text)
    assert page.errors == []
    assert text.startswith("<!DOCTYPE html>")
    assert "<script" not in text.lower()
    tags = {t for t, _, _ in page.elements}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert all(not k.startswith("on") for _, a, _ in page.elements for k in a)
    assert all((a.get("href") or "#").startswith("#") for _, a, _ in page.elements)
    assert all("src" not in a for _, a, _ in page.elements)
    assert len(page.find("style")) == 1


def test_html_escapes_untrusted_argument_values() -> None:
    text = render_html(bundle())
    assert XSS not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert any(XSS in t for _, t in Page(text).find("code"))  # shown as text, intact


def test_html_marks_the_first_divergent_step_on_its_row() -> None:
    assert COMPARISON.first_divergent_step == "crm"
    text = render_html(bundle())
    page = Page(text)
    rows = page.find("tr", id="first-divergence")
    assert len(rows) == 1 and rows[0][0]["class"] == "first-divergence"
    assert rows[0][1].startswith("crm") and "crm.find_by_phone" in rows[0][1]
    assert "crm.get_customer" in rows[0][1]
    assert len(page.find("a", href="#first-divergence")) == 1
    assert step_column(text) == ["planner", "search", "crm", "email"]
    email_row = next(t for a, t in page.find("tr") if t.startswith("email"))
    assert "CONFIRMED" in email_row and "BLOCKED" in email_row and "critical" in email_row


def test_html_computes_the_comparison_when_the_bundle_has_none() -> None:
    page = Page(render_html(bundle(comparison=None)))
    assert page.find("tr", id="first-divergence")[0][1].startswith("crm")


def test_html_aligns_a_step_only_the_replay_ran() -> None:
    steps = ("planner", "search", "crm", "verify", "email")
    text = render_html(bundle(replay=REPLAY.model_copy(update={"steps": steps})))
    assert step_column(text) == list(steps)
    verify = next(t for _, t in side_by_side(text).find("tr") if t.startswith("verify"))
    assert verify.strip() == "verify"  # nothing recorded there in either run


def test_html_without_a_replay_shows_the_source_alone() -> None:
    text = render_html(bundle(replay=None, comparison=None))
    page = Page(text)
    assert page.errors == [] and page.find("tr", id="first-divergence") == []
    assert step_column(text) == ["planner", "search", "crm", "email"]
    assert "(none in this report)" in text


def test_html_banner_only_when_no_human_confirmed_the_cause() -> None:
    unconfirmed = render_html(bundle(confirmed=False))
    page = Page(unconfirmed)
    banner = page.find("div", **{"class": "banner"})
    assert len(banner) == 1 and NOT_CONFIRMED in banner[0][1]
    assert "Confirmed root cause" not in unconfirmed
    assert "(automatic, not a root cause)" in unconfirmed  # the classification is labelled
    assert "replaybook incident confirm inc-1" in unconfirmed
    confirmed = render_html(bundle())
    assert NOT_CONFIRMED not in confirmed and 'class="banner"' not in confirmed
    box = Page(confirmed).find("div", **{"class": "confirmed"})
    assert len(box) == 1 and CAUSE in box[0][1]
    # a blank confirmation is not a confirmation
    blank = bundle().report.model_copy(update={"confirmed_root_cause": "  "})
    assert NOT_CONFIRMED in render_html(bundle(report=blank))


def test_html_shows_rates_with_their_interval() -> None:
    text = render_html(bundle())
    low, high = wilson_interval(50, 50)
    assert f"50/50 reproduced (100%, 95% CI {low:.1%}–100.0%)" in text and high == 1.0
    assert "0/50 reproduced (0%, 95% CI 0.0%–7.1%)" in text
    rates = Page(text).find("ul", **{"class": "rates"})[0][1]
    assert rates.index("prompt=v17") < rates.index("50/50") < rates.index("prompt=v18")


def test_html_flags_limited_evidence_and_lists_pending_tasks() -> None:
    b = bundle(confirmed=False)
    limited = replay("rp-x", 1, 1, mode=ReplayMode.EXACT, confidence=ReplayConfidence.LIMITED)
    report = b.report.model_copy(update={"replays": (limited,)})
    text = render_html(b.model_copy(update={"report": report, "replay_labels": {}}))
    assert "LIMITED" in text and "not an exact replay" in text
    pending = Page(text).find("section", id="pending")[0][1]
    assert "CONFIRM_ROOT_CAUSE" in pending and "replaybook incident confirm inc-1" in pending


def test_html_lists_timeline_evidence_diffs_and_regression_cases() -> None:
    page = Page(render_html(bundle()))
    timeline = page.find("section", id="timeline")[0][1]
    assert timeline.index("FREEZING") < timeline.index("REPLAYING")
    assert "2025-03-04 03:00:00Z" in timeline and "42 events frozen" in timeline
    assert H in page.find("section", id="evidence")[0][1]
    diffs = page.find("section", id="critical-diffs")[0][1]
    assert DiffType.SIDE_EFFECT_CHANGED in diffs and "carol@x.com" in diffs
    cases = page.find("section", id="regression")[0][1]
    assert "case-1" in cases and "no email.send where to not_equal 'carol@x.com'" in cases


# the bundle ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"source": REPLAY}, "source run"),
        ({"replay": None}, "needs the replay trajectory"),
        ({"replay_labels": {"rp-nope": "x"}}, "rp-nope"),
        ({"regression_case_ids": ()}, "case-1"),
    ],
)
def test_bundle_refuses_inconsistent_parts(update: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        bundle(**update)


def test_critical_diffs_come_from_a_real_comparison() -> None:
    critical = bundle().report.critical_diffs
    assert critical and all(isinstance(d, TrajectoryDiff) and d.critical for d in critical)
    assert COMPARISON.diffs[0].source_step == "crm"


def test_html_links_back_to_the_console_only_when_its_url_is_known() -> None:
    b = bundle()
    incident = b.report.incident_id
    page = Page(render_html(b, console_url="https://rb.example/ui/"))
    hrefs = [a.get("href") or "#" for t, a, _ in page.elements if t == "a"]
    leaving = [h for h in hrefs if not h.startswith("#")]
    assert leaving == [f"https://rb.example/ui/incidents/{incident}"]
    assert page.errors == [] and "<script" not in render_html(b, console_url="https://rb.example")
    # unset: self-contained, no link leaving the page
    assert all((a.get("href") or "#").startswith("#") for _, a, _ in Page(render_html(b)).elements)
    env = {"REPLAYBOOK_CONSOLE_URL": "https://rb.example/ui/"}
    assert Settings.from_env(env).api.console_url == "https://rb.example/ui/"
    with pytest.raises(ConfigurationError, match="REPLAYBOOK_CONSOLE_URL"):
        Settings.from_env({"REPLAYBOOK_CONSOLE_URL": "javascript:alert(1)"})
