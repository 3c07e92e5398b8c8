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

from typing import Annotated, Any

import typer

from cli.common import JsonOption, fail, load_settings, print_json, run_async
from models.errors import InvalidInputError
from models.forensics import ExpectedComparison, ForensicsRun

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
        "(repeatable), e.g. retail=../shared/testdata/tau-bench/retail/agentrx-retail-full.json.",
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


def _runs_from_files(files: list[str], tools_info_path: str | None) -> list[ForensicsRun]:
    from integrations.tau_bench.sources import load_json, runs_from_file

    if not tools_info_path:
        raise InvalidInputError("--file needs --tools-info PATH (the tools' schemas)")
    tools_info = load_json(tools_info_path)
    runs: list[ForensicsRun] = []
    for spec in files:
        domain, sep, path = spec.partition("=")
        if not sep or not path:
            raise InvalidInputError(f"--file {spec!r}: expected DOMAIN=PATH")
        runs += runs_from_file(path, domain, tools_info)
    return runs


async def _imported_runs(run_id: str | None = None) -> list[ForensicsRun]:
    from integrations.tau_bench.imported import load_imported_runs
    from stores.bundle import open_stores

    async with open_stores(load_settings()) as stores:
        return await load_imported_runs(stores, run_id)


def _world(env_data: str | None) -> Any:
    from integrations.tau_bench.world.measure import WorldData

    return WorldData(env_data) if env_data else None


def _expectations(files: list[str] | None) -> dict[Any, Any]:
    """The ``*.expectations.jsonl`` files beside the given result files."""
    from integrations.tau_bench.world.measure import expectations_beside, load_expectations

    out: dict[Any, Any] = {}
    for spec in files or []:
        domain, _, path = spec.partition("=")
        beside = expectations_beside(path)
        if beside is not None:
            out.update(load_expectations(beside, domain))
    return out


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
    from models.forensics import compare_expected

    if files:
        runs = [r for r in _runs_from_files(files, tools_info) if r.run_id == run_id]
    else:
        runs = await _imported_runs(run_id)
    if not runs:
        fail(f"forensics: no imported tau-bench run {run_id!r}")
    world = _world(env_data)
    state = world.state_matches(runs[0]) if world is not None else None
    comparison = compare_expected(runs[0], world_state_matches=state)
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
    typer.echo("failure signatures:")
    for name, count in summary["signatures"].items():
        typer.echo(f"  {count:>4}  {name}")
    loc = summary["localization"]
    if loc:
        typer.echo(
            f"localisation on {loc['runs']} annotated runs: exact {loc['exact']}, ±2 "
            f"{loc['within_2']}  (baseline first Error: write: exact {loc['baseline_exact']}, "
            f"±2 {loc['baseline_within_2']})"
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
    from integrations.tau_bench.evaluate import evaluate_runs
    from integrations.tau_bench.sources import dedupe_runs, load_annotations

    runs = _runs_from_files(files, tools_info) if files else await _imported_runs()
    if not runs:
        fail(
            "forensics: no imported tau-bench runs (import some with `replaybook import tau-bench`)"
        )
    runs, duplicates = dedupe_runs(runs)
    world = _world(env_data)
    summary = evaluate_runs(
        runs, load_annotations(annotations), world=world.state_matches if world else None
    )
    summary["duplicates_skipped"] = duplicates
    if world is not None:
        from integrations.tau_bench.world.measure import measure_world

        summary["world"] = measure_world(runs, world, _expectations(files))
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
    if not env_data:
        fail("forensics world needs --env-data PATH (the benchmark's env-data folder)")
    data = _world(env_data)
    runs = _runs_from_files(files, tools_info) if files else await _imported_runs(run_id)
    if run_id is None:
        if db_version:
            fail("--db-version needs a RUN_ID (without one, both versions are measured)")
        from integrations.tau_bench.sources import dedupe_runs
        from integrations.tau_bench.world.measure import measure_world

        runs, _ = dedupe_runs(runs)
        if not runs:
            fail("forensics: no tau-bench runs to replay")
        result = measure_world(runs, data, _expectations(files))
        if as_json:
            print_json(result)
        else:
            _print_world(result)
        return
    runs = [r for r in runs if r.run_id == run_id]
    if not runs:
        fail(f"forensics: no tau-bench run {run_id!r}")
    replay = data.replay(runs[0], db_version)
    if as_json:
        print_json({**replay.summary(), "calls": [c.model_dump() for c in replay.calls]})
        return
    _print_replay(replay)
