"""The incident report as JSON, Markdown and one self-contained HTML page (pure: no I/O, no clock).

Written for someone reading an incident at 3 a.m.: the answer first (signature, the root cause
if a human confirmed it, reproduction rates with their 95 % interval), then pending human tasks,
timeline, replays, critical differences, source and replay side by side, evidence with hashes
and regression cases. Markdown and HTML render one intermediate page (``_page``).

- Rule 18: only ``report.confirmed_root_cause`` is shown as the root cause; without it the page
  carries a "not confirmed by a human" banner and the classification is labelled automatic.
- Evidence is untrusted (a prompt or argument may hold ``<script>``): in HTML every value goes
  through ``html.escape``; in Markdown identifiers go in code spans and text is backslash-escaped.
  The page has no script, no external asset and no link leaving it, except, when the console's
  URL is known (``REPLAYBOOK_CONSOLE_URL``), one link to the incident's console page.
- Side by side: source and replay steps are aligned on the longest common subsequence of their
  step ids; a fact belongs to the first occurrence of its step at or after the previous fact's.
  The first divergent step (``comparison.first_divergent_step``, computed with
  ``compare_trajectories`` when the bundle has a replay but no comparison) is the first row
  whose source step, else replay step, has that id: class and anchor ``first-divergence``.
"""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from models.comparison import compare_trajectories
from models.enums import ReplayConfidence, ReplayStatus
from models.regression import describe
from models.replay import ReplayComparison, ReplayResult, TrajectoryDiff
from models.report_bundle import ReportBundle, SideEffectTruth
from models.statistics import wilson_interval
from models.trajectory import Trajectory

if TYPE_CHECKING:  # annotations only
    from collections.abc import Sequence
    from datetime import datetime

__all__ = [
    "NOT_CONFIRMED",
    "console_link",
    "render_html",
    "render_json",
    "render_markdown",
    "reproduction_text",
    "side_by_side_html",
]

NOT_CONFIRMED = "Root cause not confirmed by a human."
_HOW_TO_CONFIRM = (
    "Nothing here is a confirmed root cause yet; the classification is automatic. "
    "A human confirms with: replaybook incident confirm {} --root-cause TEXT --fix-version V "
    "--verified-by NAME"
)
ANCHOR = "first-divergence"

#: a piece of a cell: (style, text); styles: "" text, code, strong, critical, kind, link, br
_Span = tuple[str, str]
_Cell = list[_Span]
_BR: _Span = ("br", "")


class _Section(NamedTuple):
    anchor: str
    title: _Cell
    head: list[str]
    rows: list[list[_Cell]]
    marked: int | None = None  # the row of the first divergence


class _Page(NamedTuple):
    title: _Cell
    cause: str | None
    facts: list[tuple[str, _Cell]]
    rates: list[_Cell]
    sections: list[_Section]


# values -------------------------------------------------------------------------------------


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return repr(value)


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%SZ")


def reproduction_text(result: ReplayResult) -> str:
    """``0/50 reproduced (0%, 95% CI 0.0%–7.1%)``: counts, rate and Wilson interval over the
    conclusive runs; inconclusive runs are counted apart and make the result "not
    established" (issue 16)."""
    k, n = result.reproduced, result.runs
    if k is not None and n is not None:
        conclusive = n - result.inconclusive
        if k > conclusive:
            return f"{k}/{n} reproduced (inconsistent counts)"
        if conclusive <= 0:
            return f"not established: all {n} runs inconclusive{_reasons(result)}"
        low, high = wilson_interval(k, conclusive)
        text = f"{k}/{conclusive} reproduced ({k / conclusive:.0%}, 95% CI {low:.1%}–{high:.1%})"
        if result.inconclusive:
            text += f"; not established: {result.inconclusive}/{n} inconclusive{_reasons(result)}"
        return text
    if result.rate is not None:
        return f"{result.rate:.0%} reproduced (counts not recorded)"
    return "reproduction not measured"


def _reasons(result: ReplayResult) -> str:
    named = ", ".join(f"{k} {v}" for k, v in sorted(result.inconclusive_reasons.items()))
    return f" ({named})" if named else ""


def _confidence(result: ReplayResult) -> _Cell:
    if result.inconclusive:
        return [("critical", "LIMITED"), ("", "(inconclusive runs: not established)")]
    if result.confidence is ReplayConfidence.LIMITED:
        return [("critical", "LIMITED"), ("", "(evidence incomplete: not an exact replay)")]
    return [("", result.confidence.value)]


_REPLAY_HEAD = (
    "replay|variant|mode|status|confidence|isolation|reproduction (95% CI)|first divergence"
)


def _t(value: Any) -> _Cell:
    return [("", str(value))]


def _pre(text: str | None) -> _Cell:
    return [("pre", text or "")]


def _c(value: Any) -> _Cell:
    return [("code", str(value))]


def _step(diff: TrajectoryDiff) -> str:
    return diff.source_step or diff.replay_step or "(run)"


def _diff(d: TrajectoryDiff) -> _Cell:
    return [("critical", "critical")] * d.critical + [("code", d.type), ("", d.explanation)]


def _joined(cells: Sequence[_Cell]) -> _Cell:
    return [span for n, cell in enumerate(cells) for span in ([_BR] if n else []) + cell]


# side by side -------------------------------------------------------------------------------


def _align(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int | None, int | None]]:
    """Rows ``(step, i, j)`` along the longest common subsequence of the step ids of source
    (``a``) and replay (``b``); a step of one run only has ``None`` for the other's index."""
    lcs = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            lcs[i][j] = lcs[i + 1][j + 1] + 1 if a[i] == b[j] else max(lcs[i + 1][j], lcs[i][j + 1])
    rows: list[tuple[str, int | None, int | None]] = []
    i = j = 0
    while i < len(a) or j < len(b):
        if i < len(a) and j < len(b) and a[i] == b[j]:
            rows.append((a[i], i, j))
            i, j = i + 1, j + 1
        elif j >= len(b) or (i < len(a) and lcs[i + 1][j] >= lcs[i][j + 1]):
            rows.append((a[i], i, None))
            i += 1
        else:
            rows.append((b[j], None, j))
            j += 1
    return rows


def _fact(kind: str, name: str, args: Any = None, status: str = "", text: str = "") -> _Cell:
    cell: _Cell = [("kind", kind), ("code", name)]
    cell += [("code", _json(args))] if args is not None else []
    cell += [("strong", status)] if status else []
    return cell + ([_BR, ("code", text)] if text else [])


def _facts(t: Trajectory) -> dict[int | None, list[_Cell]]:
    """Each fact as a cell, by step occurrence (None: a step the run never started)."""
    groups: list[list[tuple[str, _Cell]]] = [
        [
            (d.step_id, _fact("model", ", ".join(d.tool_names) or "answer", text=d.content or ""))
            for d in t.model_decisions
        ],
        [(p.step_id, _fact("policy", p.policy_id, status=p.decision)) for p in t.policy_decisions],
        [(c.step_id, _fact("tool", c.capability_id, c.arguments, c.outcome)) for c in t.tool_calls],
        [
            (e.step_id, _fact("write", e.capability_id, e.arguments, e.status))
            for e in t.side_effects
        ],
    ]
    out: dict[int | None, list[_Cell]] = {}
    for group in groups:
        cursor = 0
        for step, cell in group:
            at = next((k for k in range(cursor, len(t.steps)) if t.steps[k] == step), None)
            if at is None:
                at = next((k for k in range(cursor) if t.steps[k] == step), None)
            else:
                cursor = at
            out.setdefault(at, []).append(cell)
    return out


def _side_by_side(
    source: Trajectory, replay: Trajectory | None, comparison: ReplayComparison | None
) -> _Section:
    sf, rf = _facts(source), (_facts(replay) if replay is not None else {})
    aligned = _align(source.steps, replay.steps if replay is not None else ())
    first = comparison.first_divergent_step if comparison is not None else None
    marked = next((r for r, (s, i, _) in enumerate(aligned) if i is not None and s == first), None)
    if marked is None:
        marked = next((r for r, (s, _, _) in enumerate(aligned) if s == first), None)
    diffs: dict[int | None, list[_Cell]] = {}
    for d in comparison.diffs if comparison is not None else ():
        at = next((r for r, (s, _, _) in enumerate(aligned) if s == _step(d)), None)
        diffs.setdefault(at, []).append(_diff(d))
    rows = [
        [
            _c(s),
            *(
                _joined(x.get(k, []) if k is not None else [])
                for x, k in ((sf, i), (rf, j), (diffs, r))
            ),
        ]
        for r, (s, i, j) in enumerate(aligned)
    ]
    if sf.get(None) or rf.get(None) or diffs.get(None):
        rows.append([_t("(no step)"), *(_joined(x.get(None, [])) for x in (sf, rf, diffs))])
    title = [("", "Source"), ("code", source.run_id), ("", "vs replay")]
    title += [("code", replay.run_id)] if replay is not None else [("", "(none in this report)")]
    return _Section("side-by-side", title, ["step", "source", "replay", "difference"], rows, marked)


# side effects and replays -------------------------------------------------------------------

_SIDE_EFFECT_HEAD = (
    "side effect|capability|applied|status history|reconciliation|evidence|provider request id|"
    "provider receipt"
)


def applied_text(e: SideEffectTruth) -> str:
    if e.applied is None:
        return "UNKNOWN: not established"
    return "APPLIED" if e.applied else "NOT APPLIED"


def side_effect_answer(e: SideEffectTruth) -> _Cell:
    """The answer line of one write: did it happen, and how that is known."""
    cell: _Cell = [("critical" if e.applied is None else "strong", applied_text(e))]
    cell += [
        ("", f"(status {e.status}"),
        ("", f"; {e.reconciliation})" if e.reconciliation else ")"),
    ]
    if e.provider_request_id:
        cell += [("", "request id"), ("code", e.provider_request_id)]
    return cell


def side_effect_row(e: SideEffectTruth) -> list[_Cell]:
    history = " → ".join(f"{h.status} (#{h.sequence}, {_when(h.at)})" for h in e.history)
    return [
        _c(e.side_effect_id),
        _c(e.capability_id),
        [("critical" if e.applied is None else "strong", applied_text(e))],
        _t(history or e.status),
        _t(e.reconciliation or "not reconciled"),
        _t(e.evidence or "—"),
        _c(e.provider_request_id or "—"),
        _c(e.provider_receipt or "none recorded"),
    ]


def _shows(bundle: ReportBundle, replay_id: str) -> bool:
    shown = bundle.replay.run_id if bundle.replay is not None else None
    return shown is not None and (shown == replay_id or shown.startswith(f"{replay_id}-"))


def _first_divergence(
    r: ReplayResult, bundle: ReportBundle, comparison: ReplayComparison | None
) -> _Cell:
    """The replay's first divergent step: its own comparison's, the side-by-side one's when it
    is the replay shown, else said to be not compared here (never a bare dash)."""
    own = r.comparison or (comparison if _shows(bundle, r.replay_id) else None)
    if own is None:
        return _t("not compared in this report")
    return _c(own.first_divergent_step or "none (same steps)")


def _replay_row(
    r: ReplayResult, label: str, bundle: ReportBundle, comparison: ReplayComparison | None
) -> list[_Cell]:
    return [
        _c(r.replay_id),
        _t(label),
        _c(r.mode),
        _c(r.status),
        _confidence(r),
        _c(r.isolation or "not recorded"),
        _t(reproduction_text(r)),
        _first_divergence(r, bundle, comparison),
    ]


def _no_critical_difference(bundle: ReportBundle, comparison: ReplayComparison | None) -> str:
    """Why the critical differences are empty, and which replays that says nothing about."""
    if comparison is None:
        text = "no replay was compared with the source"
    else:
        shown = bundle.replay.run_id if bundle.replay is not None else "the replay shown"
        text = f"the replay shown side by side ({shown}) has no critical difference from the source"
    unfinished = [
        f"{r.replay_id} {r.status.value}"
        for r in bundle.report.replays
        if r.status is not ReplayStatus.COMPLETED
    ]
    if unfinished:
        text += "; not compared because they did not complete: " + ", ".join(unfinished)
    return text


# the page -----------------------------------------------------------------------------------

_FORK_HEAD = "rank|step|score|why|fork replays (reproduced/runs)"


def _fork_rows(bundle: ReportBundle) -> list[list[_Cell]]:
    """The ranked fork points with each fork replay's reproduction, so a reader sees at which
    step a change flips the outcome."""
    rows = []
    for rank, point in enumerate(bundle.fork_points, start=1):
        forks = [f for f in bundle.fork_results if f.step_id == point.step_id]
        shown = [
            _t(f"{f.label.split(' ', 1)[-1]}: {f.reproduced}/{f.runs} ({f.replay_id}, {f.status})")
            for f in forks
        ]
        rows.append(
            [
                _t(str(rank)),
                _c(point.step_id),
                _t(str(point.score)),
                _t(", ".join(point.reasons)),
                _joined(shown) if shown else _t("not forked"),
            ]
        )
    return rows


_DRIFT_HEAD = "where|recorded compiled hash|recompiled hash|unified diff (recorded → recompiled)"


def _drift_rows(bundle: ReportBundle) -> list[list[_Cell]]:
    """An EXACT replay sent the recorded prompt, but today's code compiles another one."""
    return [
        [_t(d.explanation), _c(d.source_prompt_hash), _c(d.replay_prompt_hash), _pre(d.prompt_diff)]
        for d in bundle.prompt_drifts
    ]


def _failure_type_facts(bundle: ReportBundle) -> list[tuple[str, _Cell]]:
    """The failure type: a human's confirmed one is the incident's, and the automatic
    classification stays shown, labelled as such."""
    report, c = bundle.report, bundle.classification
    automatic = ("strong", "(automatic, not a root cause)")
    facts: list[tuple[str, _Cell]] = []
    if report.failure_type_confirmed and report.failure_type is not None:
        confirmed = ("strong", "(confirmed by a human)")
        facts.append(("Failure type", [("code", report.failure_type), confirmed]))
        if c is not None:
            facts.append(("Automatic failure type", [("code", c.failure_type), automatic]))
    elif c is not None:
        facts.append(("Failure type", [("code", c.failure_type), automatic]))
    if c is not None:
        facts.append(("Classification", [("code", c.signature), ("", c.explanation), automatic]))
    return facts


def _page(bundle: ReportBundle) -> _Page:
    report = bundle.report
    comparison = bundle.comparison
    if comparison is None and bundle.replay is not None:
        comparison = compare_trajectories(bundle.source, bundle.replay)
    cause = report.confirmed_root_cause if (report.confirmed_root_cause or "").strip() else None

    def label(r: ReplayResult) -> str:
        return bundle.replay_labels.get(r.replay_id) or r.mode.value

    facts: list[tuple[str, _Cell]] = [("Source run", _c(report.source_run_id))]
    facts += [
        (f"Side effect {e.capability_id}", side_effect_answer(e)) for e in bundle.side_effects
    ]
    facts += _failure_type_facts(bundle)
    facts += [
        ("Fix version", _c(report.fix_version or "—")),
        ("Verified by", _t(report.verified_by or "—")),
    ]
    side_by_side = _side_by_side(bundle.source, bundle.replay, comparison)
    if comparison is not None and comparison.first_divergent_step is not None:
        link = "link" if side_by_side.marked is not None else "code"  # no dangling anchor
        facts.append(("First divergence", [("", "step"), (link, comparison.first_divergent_step)]))
    if report.generated_at is not None:
        facts.append(("Generated", _t(_when(report.generated_at))))
    limited = [("critical", "LIMITED evidence")]
    rates = [
        [("code", label(r))]
        + ([("critical", r.status.value)] if r.status is not ReplayStatus.COMPLETED else [])
        + [("strong", reproduction_text(r))]
        + limited * (r.confidence is ReplayConfidence.LIMITED)
        for r in report.replays
    ]
    pending = [
        [_c(p.kind), _c(p.subject or ""), _t(p.detail), _c(p.command or "")] for p in bundle.pending
    ]
    # one phase, several entries (entered, then what happened in it): the phase is named once
    timeline = [
        [
            _c(t.phase if n == 0 or bundle.timeline[n - 1].phase != t.phase else "″"),
            _t(_when(t.at)),
            _t(t.detail),
        ]
        for n, t in enumerate(bundle.timeline)
    ]
    side_effects = [side_effect_row(e) for e in bundle.side_effects]
    replays = [_replay_row(r, label(r), bundle, comparison) for r in report.replays]
    critical = [[_c(d.type), _c(_step(d)), _t(d.explanation)] for d in report.critical_diffs]
    if not critical:
        critical = [[_t("none"), _t(""), _t(_no_critical_difference(bundle, comparison))]]
    evidence = [[_t(e.type), _c(e.ref), _c(e.content_hash)] for e in report.evidence]
    cases = {case.case_id: case for case in bundle.regression_cases}
    regression = []
    for case_id in bundle.regression_case_ids:
        case = cases.get(case_id)
        checks = _joined([_t(describe(a)) for a in case.assertions]) if case else []
        status, about = (case.status, case.description) if case else ("", "")
        regression.append([_c(case_id), _t(status), _t(about), checks])
    spec = [
        ("side-effects", "Side effects: what really happened", _SIDE_EFFECT_HEAD, side_effects),
        ("pending", "Waiting for a human", "task|subject|detail|command", pending),
        ("fork-points", "Fork points (divergence first)", _FORK_HEAD, _fork_rows(bundle)),
        ("timeline", "Timeline", "phase|at|detail", timeline),
        ("replays", "Replays", _REPLAY_HEAD, replays),
        ("critical-diffs", "Critical differences", "type|step|explanation", critical),
        ("prompt-drift", "Prompt drift (PROMPT_DRIFT)", _DRIFT_HEAD, _drift_rows(bundle)),
        ("evidence", "Evidence", "type|ref|sha256", evidence),
        ("regression", "Regression cases", "case|status|description|assertions", regression),
    ]
    sections = [
        _Section(a, _t(t), h.split("|"), rows)
        for a, t, h, rows in spec
        if rows or a not in ("pending", "side-effects", "fork-points", "prompt-drift")
    ]
    sections.insert(-2, side_by_side)
    title = [("", "Incident"), ("code", report.incident_id), ("code", report.failure_signature)]
    return _Page(title, cause, facts, rates, sections)


# renderers ----------------------------------------------------------------------------------


def render_json(bundle: ReportBundle) -> str:
    """The bundle as JSON: sorted keys, indent 2 (``ReportBundle.model_validate_json`` reads it)."""
    data = bundle.model_dump(mode="json")
    return json.dumps(data, ensure_ascii=False, sort_keys=True, indent=2) + "\n"


def _md(text: str) -> str:
    out = " ".join(text.split())
    for ch in "\\`*[]<>|":
        out = out.replace(ch, "\\" + ch)
    return out


def _md_cell(cell: _Cell) -> str:
    parts = []
    for style, text in cell:
        value = " ".join(str(text).split())
        if style == "br":
            parts.append("<br>")
        elif style == "pre":  # a multi-line text: in a fenced block after the table
            parts.append("(below)")
        elif not value:
            continue
        elif style in ("code", "link"):
            value = value.replace("|", "\\|")
            parts.append(f"`` {value} ``" if "`" in value else f"`{value}`")
        else:
            parts.append(f"**{_md(value)}**" if style in ("strong", "critical") else _md(value))
    return " ".join(parts)


def render_markdown(bundle: ReportBundle) -> str:
    page = _page(bundle)
    out = [f"# {_md_cell(page.title)}", ""]
    if page.cause:
        out += [f"**Confirmed root cause** (by a human): {_md(page.cause)}", ""]
    else:
        out += [f"> **{NOT_CONFIRMED}** {_md(_HOW_TO_CONFIRM.format(bundle.incident_id))}", ""]
    out += [f"- {label}: {_md_cell(cell)}" for label, cell in page.facts]
    out += ["", "## Reproduction", ""]
    out += [f"- {_md_cell(r)}" for r in page.rates] or ["No replay yet."]
    for s in page.sections:
        out += ["", f"## {_md_cell(s.title)}", ""]
        if not s.rows:
            out.append("None.")
            continue
        out += ["| " + " | ".join(s.head) + " |", "|" + " --- |" * len(s.head)]
        for n, row in enumerate(s.rows):
            cells = [_md_cell(cell) for cell in row]
            if n == s.marked:
                cells[0] = f"**⚑ first divergence** {cells[0]}"
            out.append("| " + " | ".join(cells) + " |")
        out += _md_blocks(s)
    return "\n".join(out) + "\n"


def _md_blocks(section: _Section) -> list[str]:
    """The multi-line texts (``pre``) of a section's rows, each in a fenced block longer than
    any backtick run inside it (evidence cannot close the block)."""
    out: list[str] = []
    for row in section.rows:
        for cell in row:
            for style, text in cell:
                if style != "pre" or not text:
                    continue
                longest = max((len(m) for m in re.findall("`+", text)), default=0)
                fence = "`" * max(3, longest + 1)
                out += ["", f"{_md_cell(row[0])}:", "", f"{fence}diff", text.rstrip("\n"), fence]
    return out


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1400px;padding:1em 2em}
h1{font-size:1.5em}h2{font-size:1.15em;border-bottom:1px solid #ccc;margin-top:1.6em}
code{font:12px ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
pre{font:12px ui-monospace,monospace;white-space:pre-wrap;margin:0}
table{border-collapse:collapse;width:100%}th{background:#f3f3f3}
th,td{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}
.banner{background:#fde2e1;border:2px solid #c0392b;padding:.8em;font-size:1.1em}
.confirmed{background:#e3f5e6;border:2px solid #2e7d32;padding:.8em;font-size:1.1em}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}dt{font-weight:600}dd{margin:0}
ul.rates{font-size:1.1em}.critical{color:#b00020;font-weight:600}
.kind{display:inline-block;min-width:3.5em;color:#555;font-size:11px;text-transform:uppercase}
tr.first-divergence td{background:#fff3c4}
tr.first-divergence td:first-child{border-left:6px solid #e0a800}
#side-by-side td:first-child code,#replays td:first-child code{white-space:nowrap;word-break:normal}
"""
_TAGS = {"code": ("<code>", "</code>"), "strong": ("<strong>", "</strong>")}
_TAGS |= {k: (f'<span class="{k}">', "</span>") for k in ("critical", "kind")}


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _html_cell(cell: _Cell) -> str:
    parts = []
    for style, text in cell:
        if style == "br":
            parts.append("<br>")
        elif not str(text):
            continue
        elif style == "link":
            parts.append(f'<a href="#{ANCHOR}"><code>{_e(text)}</code></a>')
        elif style == "pre":
            parts.append(f"<pre>{_e(text)}</pre>")
        else:
            start, end = _TAGS.get(style, ("", ""))
            parts.append(f"{start}{_e(text)}{end}")
    return " ".join(parts)


def console_link(console_url: str, incident_id: str) -> str:
    """The incident's page in the web console served at ``console_url`` (e.g.
    ``http://host:port/ui/``)."""
    return f"{console_url.rstrip('/')}/incidents/{quote(incident_id, safe='')}"


def render_html(bundle: ReportBundle, console_url: str | None = None) -> str:
    """One self-contained page: inline CSS, no script, every evidence value escaped; with
    ``console_url`` (the web console's root), one link back to the incident's console page."""
    page, report = _page(bundle), bundle.report
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>Incident {_e(report.incident_id)}: {_e(report.failure_signature)}</title>",
        f"<style>{_CSS}</style></head><body><header><h1>{_html_cell(page.title)}</h1>",
    ]
    if console_url:
        href = _e(console_link(console_url, report.incident_id))
        out.append(f'<p class="console"><a href="{href}">Open in the web console</a></p>')
    if page.cause:
        head = "<strong>Confirmed root cause</strong> (by a human):"
        out.append(f'<div class="confirmed">{head} {_e(page.cause)}</div>')
    else:
        how = _e(_HOW_TO_CONFIRM.format(bundle.incident_id))
        out.append(f'<div class="banner" role="alert"><strong>{NOT_CONFIRMED}</strong> {how}</div>')
    out += [
        f"<dl>{''.join(f'<dt>{_e(k)}</dt><dd>{_html_cell(v)}</dd>' for k, v in page.facts)}</dl>"
    ]
    rates = "".join(f"<li>{_html_cell(r)}</li>" for r in page.rates) or "<li>No replay yet.</li>"
    out.append(f'<h2>Reproduction</h2><ul class="rates">{rates}</ul></header>')
    for s in page.sections:
        out.append(f'<section id="{s.anchor}"><h2>{_html_cell(s.title)}</h2>')
        if not s.rows:
            out.append("<p>None.</p></section>")
            continue
        out.append(
            f"<table><thead><tr>{''.join(f'<th>{_e(h)}</th>' for h in s.head)}</tr></thead><tbody>"
        )
        for n, row in enumerate(s.rows):
            attrs = f' class="{ANCHOR}" id="{ANCHOR}"' if n == s.marked else ""
            out.append(f"<tr{attrs}>{''.join(f'<td>{_html_cell(c)}</td>' for c in row)}</tr>")
        out.append("</tbody></table></section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def side_by_side_html(
    source: Trajectory, replay: Trajectory, comparison: ReplayComparison | None = None
) -> str:
    """The report's side-by-side table of ``source`` and ``replay`` (compared here when
    ``comparison`` is None), for the web console: a row that differs (a difference found
    there, or a step of one run only) has class ``differs``, the first divergence is marked
    as in the report, and every value is escaped."""
    comparison = comparison or compare_trajectories(source, replay)
    section = _side_by_side(source, replay, comparison)
    out = [
        '<table class="side-by-side"><thead><tr>',
        "".join(f"<th>{_e(h)}</th>" for h in section.head),
        "</tr></thead><tbody>",
    ]
    aligned = _align(source.steps, replay.steps)
    for n, row in enumerate(section.rows):
        # a difference found there, or a step of one run only (the last row, beyond the
        # aligned steps, holds the facts of no step)
        one_side = n < len(aligned) and None in aligned[n][1:]
        differs = bool(row[3]) or one_side
        classes = " ".join(
            c for c, on in ((ANCHOR, n == section.marked), ("differs", differs)) if on
        )
        attrs = (f' class="{classes}"' if classes else "") + (
            f' id="{ANCHOR}"' if n == section.marked else ""
        )
        out.append(f"<tr{attrs}>{''.join(f'<td>{_html_cell(c)}</td>' for c in row)}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)
