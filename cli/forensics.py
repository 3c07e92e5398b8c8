"""``replaybook forensics expected | evaluate | world``: benchmark runs against ground truth.

``expected RUN_ID`` compares one imported run's writes with its expected actions.
``evaluate`` measures, over every imported tau-bench run (or over result files given with
``--file DOMAIN=PATH``), how often the predicted outcome agrees with the recorded reward, which
failure signatures dominate, and how well the named divergence localises annotated root causes.
``world`` re-executes runs' tool calls against a private copy of the domain database with our
own tools. Whenever ``--env-data`` names the benchmark's databases, ``expected`` and
``evaluate`` use that world replay for the state check (final database equal to the one the
expected actions produce), as the benchmark itself does.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import JsonOption, fail, load_settings, print_json, run_async

if TYPE_CHECKING:
    from integrations.tau_bench.forensics import ExpectedComparison
    from stores.bundle import Stores

app = typer.Typer()

forensics_app = typer.Typer(
    help="Forensics against ground truth for imported benchmark runs.", no_args_is_help=True
)
app.add_typer(forensics_app, name="forensics")

FileOption = Annotated[
    list[str] | None,
    typer.Option(
        "--file",
        help="Read runs from a tau-bench results file instead of the store: DOMAIN=PATH "
        "(repeatable), e.g. retail=tau-bench/retail/agentrx-retail-full.json of the test data.",
    ),
]
ToolsInfoOption = Annotated[
    str | None, typer.Option("--tools-info", help="tools_info.json (needed with --file).")
]
EnvDataOption = Annotated[
    str | None,
    typer.Option(
        "--env-data",
        help="The benchmark's databases (env-data/<version>/<domain>/*.json): enables the "
        "world replay.",
    ),
]
AnnotationsOption = Annotated[
    str | None,
    typer.Option("--annotations", help="AgentRx failure annotations, for localisation."),
]


def _stores() -> AbstractAsyncContextManager[Stores]:
    from stores.bundle import open_stores

    return open_stores(load_settings().stores)


def _describe(c: ExpectedComparison) -> list[str]:
    verdict = "pass" if c.predicted_reward == 1.0 else "fail"
    lines = [
        f"run {c.run_id}  {c.domain} task {c.task_id} trial {c.trial}",
        f"  predicted: {verdict}   recorded reward: {c.recorded_reward}",
        f"  writes executed: {c.writes_executed}  failed (Error:): {c.writes_failed}"
        f"  match expected: {c.writes_match}",
    ]
    for d in c.missing:
        lines.append(f"  missing   {d.name} {d.expected}")
    for d in c.extra:
        lines.append(f"  extra     {d.name} {d.actual}  (message {d.message_index})")
    for d in c.differing:
        lines.append(
            f"  differing {d.name} [{', '.join(d.arguments)}]  (message {d.message_index})"
            f"\n    expected {d.expected}\n    actual   {d.actual}"
        )
    for output, found in c.outputs.items():
        lines.append(f"  output {output!r}: {'found' if found else 'NOT found'}")
    if c.world_state_matches is not None:
        lines.append(f"  world replay: final state matches expected: {c.world_state_matches}")
    if c.finished is False:
        lines.append("  the episode was cut before it ended (never scored)")
    lines.append(f"  first divergent message: {c.first_divergent_message_index}")
    if c.signature_key:
        lines.append(f"  signature: {c.signature_key}")
    if c.category:
        lines.append(f"  category (AgentRx): {c.category} at step {c.category_step}")
    for f in c.findings:
        lines.append(
            f"  {f.severity.upper()} {f.code} [{f.kind}]: {f.explanation} "
            f"(messages {', '.join(map(str, f.message_indexes))})"
        )
    return lines


@forensics_app.command("expected")
@run_async
async def expected(
    run_id: str,
    as_json: JsonOption = False,
    files: FileOption = None,
    tools_info: ToolsInfoOption = None,
    env_data: EnvDataOption = None,
) -> None:
    """Compare a run's writes with its expected actions and predict its outcome."""
    from app.forensics import expected_comparison, load_runs

    runs = await load_runs(_stores, files, tools_info, run_id)
    if not runs:
        fail(f"forensics: no imported tau-bench run {run_id!r}")
    comparison = expected_comparison(runs[0], env_data)
    if as_json:
        print_json(comparison.model_dump(mode="json"))
        return
    typer.echo("\n".join(_describe(comparison)))


def _print_summary(summary: dict[str, Any]) -> None:
    typer.echo(
        f"runs: {summary['runs']} (scored {summary['scored_runs']}, duplicates skipped "
        f"{summary['duplicates_skipped']})   writes executed: {summary['writes_executed']}"
        f"   failed writes: {summary['writes_failed']}"
    )
    typer.echo(f"agreement with recorded reward: {summary['agreement']}")
    for row in summary["disagreements"]:
        typer.echo(
            f"  disagrees: {row['run_id']} recorded {row['recorded_reward']} predicted "
            f"{row['predicted_reward']} ({row['signature_key']})"
        )
    dup = summary["duplicates"]
    typer.echo(
        f"duplicate writes (SIDE_EFFECT_DUPLICATE, critical): {dup['findings']} in "
        f"{dup['runs']} runs"
    )
    typer.echo("failure signatures:")
    for name, count in summary["signatures"].items():
        typer.echo(f"  {count:>4}  {name}")
    loc = summary["localization"]
    if loc:
        for name, part in (("all", loc), ("held-out", loc["held_out"])):
            typer.echo(
                f"localisation on {part['runs']} annotated runs ({name}): step exact "
                f"{part['exact']}, ±1 {part['within_1']}, ±2 {part['within_2']}, category "
                f"{part['category']}  (baseline first Error: write: exact "
                f"{part['baseline_exact']}, ±1 {part['baseline_within_1']}, ±2 "
                f"{part['baseline_within_2']}, category {part['baseline_category']})"
            )
    if "world" in summary:
        _print_world(summary["world"])


def _print_world(w: dict[str, Any]) -> None:
    typer.echo(
        f"world replay: {w['runs']} runs ({w['runs_with_expectations']} with expectations)   "
        f"outputs reproduced: {w['outputs_reproduced']}/{w['outputs_compared']}"
    )
    if w["runs_with_expectations"]:
        typer.echo(
            f"  final hash = expectations: {w['final_hash_matches']}   expected-actions hash: "
            f"{w['expected_actions_hash_matches']}   mutating calls: {w['mutating_calls_agree']}"
            f"   drift point on the other database: {w['drift_point_agreement']}"
        )
    for row in w["problems"]:
        typer.echo(f"  {row['run_id']}: {row['problem']}")


@forensics_app.command("evaluate")
@run_async
async def evaluate(
    as_json: JsonOption = False,
    files: FileOption = None,
    tools_info: ToolsInfoOption = None,
    annotations: AnnotationsOption = None,
    env_data: EnvDataOption = None,
) -> None:
    """Agreement of predicted outcomes with recorded rewards, signatures, localisation."""
    from app.forensics import evaluate as evaluate_runs
    from app.forensics import load_runs

    runs = await load_runs(_stores, files, tools_info)
    if not runs:
        fail(
            "forensics: no imported tau-bench runs (import some with `replaybook import tau-bench`)"
        )
    summary = evaluate_runs(runs, annotations=annotations, env_data=env_data, files=files)
    if as_json:
        print_json(summary)
        return
    _print_summary(summary)


DbVersionOption = Annotated[
    str | None,
    typer.Option(
        "--db-version",
        help="Replay against this database version (7362a17 | 59a200c) instead of the one the "
        "run was recorded on: names the first tool answer that diverges.",
    ),
]


def _print_replay(replay: Any) -> None:
    s = replay.summary()
    typer.echo(f"run {s['run_id']}  {s['domain']}  database {s['db_version']}")
    typer.echo(f"  final hash {s['final_hash']}")
    if s["expected_hash"] is not None:
        typer.echo(f"  expected   {s['expected_hash']}  match: {s['state_matches_expected']}")
    typer.echo(
        f"  outputs reproduced: {s['outputs_reproduced']}/{s['outputs_compared']}   "
        f"mutating tool messages: {s['mutating_calls']}"
    )
    typer.echo(f"  first divergent tool message: {s['first_divergent_tool_message']}")
    for c in replay.calls:
        if c.reproduced is False:
            typer.echo(
                f"  message {c.tool_index} {c.name}\n    ours     {c.output[:300]}"
                f"\n    recorded {(c.recorded or '')[:300]}"
            )


@forensics_app.command("world")
@run_async
async def world(
    run_id: Annotated[str | None, typer.Argument(help="One run; all runs when omitted.")] = None,
    as_json: JsonOption = False,
    files: FileOption = None,
    tools_info: ToolsInfoOption = None,
    env_data: EnvDataOption = None,
    db_version: DbVersionOption = None,
) -> None:
    """Re-execute runs' tool calls against a private copy of the domain database."""
    from app.forensics import load_runs, measure_world_replay, world_data

    if not env_data:
        fail("forensics world needs --env-data PATH (the benchmark's env-data folder)")
    if run_id is None and db_version:
        fail("--db-version needs a RUN_ID (without one, both versions are measured)")
    runs = await load_runs(_stores, files, tools_info, run_id)
    if run_id is None:
        result = measure_world_replay(runs, env_data, files)
        if result is None:
            fail("forensics: no tau-bench runs to replay")
        if as_json:
            print_json(result)
        else:
            _print_world(result)
        return
    if not runs:
        fail(f"forensics: no tau-bench run {run_id!r}")
    replay = world_data(env_data).replay(runs[0], db_version)
    if as_json:
        print_json({**replay.summary(), "calls": [c.model_dump() for c in replay.calls]})
        return
    _print_replay(replay)
