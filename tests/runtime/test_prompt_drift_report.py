"""PROMPT_DRIFT (issue 16), pure parts: the capped unified diff, the difference the comparison
makes of a replay's drift fact (no behavioural divergence), and how the report shows it in
JSON, Markdown and HTML (hashes, the diff, evidence escaped)."""

from __future__ import annotations

import json

from forensics.report import render_html, render_json, render_markdown
from models.comparison import compare_trajectories
from models.comparison_evidence import prompt_drift_diffs
from models.enums import DiffType
from models.trajectory import PromptDriftFact
from runtime.replay.prompt_drift import MAX_DIFF_CHARS, prompt_diff
from tests.runtime.test_report import SOURCE, bundle

RECORDED = 'ROLE: planner\n## Tenant configuration\n{"language":"fr"}\n'
TODAY = 'ROLE: planner\n## Tenant configuration\n{"language":"en"}\n<script>x</script>```\n'
H1, H2 = "sha256:" + "29" * 32, "sha256:" + "bd" * 32


def drift_fact() -> PromptDriftFact:
    return PromptDriftFact(
        step_id="planner",
        template="v17/planner",
        recorded_hash=H1,
        recompiled_hash=H2,
        diff=prompt_diff(RECORDED, TODAY),
    )


def test_the_diff_is_unified_and_capped() -> None:
    text = prompt_diff(RECORDED, TODAY)
    assert text.startswith("--- recorded\n+++ recompiled\n")
    assert '-{"language":"fr"}\n' in text and '+{"language":"en"}\n' in text
    long = prompt_diff("a\n" * 5000, "b\n" * 5000)
    assert len(long) < MAX_DIFF_CHARS + 100 and long.endswith("more characters)\n")


def test_a_drift_is_a_difference_but_no_divergence() -> None:
    replay = SOURCE.model_copy(update={"run_id": "run-exact", "prompt_drifts": (drift_fact(),)})
    comparison = compare_trajectories(SOURCE, replay)
    (diff,) = comparison.diffs
    assert diff.type is DiffType.PROMPT_DRIFT and diff.source_step == "planner"
    assert (diff.source_prompt_hash, diff.replay_prompt_hash) == (H1, H2)
    assert '+{"language":"en"}' in (diff.prompt_diff or "")
    assert comparison.first_divergent_step is None and not comparison.critical


def test_the_report_shows_the_hashes_and_the_diff_in_every_format() -> None:
    drifts = tuple(
        d.model_copy(update={"explanation": f"rp-exact-000: {d.explanation}"})
        for d in prompt_drift_diffs([drift_fact()])
    )
    shown = bundle(prompt_drifts=drifts)
    data = json.loads(render_json(shown))
    (drift,) = data["prompt_drifts"]
    assert drift["type"] == "PROMPT_DRIFT" and drift["source_prompt_hash"] == H1
    assert drift["replay_prompt_hash"] == H2 and '+{"language":"en"}' in drift["prompt_diff"]

    md = render_markdown(shown)
    assert "## Prompt drift (PROMPT_DRIFT)" in md and H1 in md and H2 in md
    # the diff in a fenced block longer than the backticks inside it
    assert "````diff\n--- recorded\n+++ recompiled\n" in md
    assert '\n+{"language":"en"}\n' in md and "+<script>x</script>```\n````" in md

    page = render_html(shown)
    assert 'id="prompt-drift"' in page and H1 in page and H2 in page
    assert "<pre>--- recorded\n+++ recompiled\n" in page
    assert "+{&quot;language&quot;:&quot;en&quot;}" in page and "<script>x" not in page

    # without a drift, no section
    assert "prompt-drift" not in render_html(bundle())
