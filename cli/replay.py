"""``replaybook replay start | status | cancel``: replays as Temporal workflows."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import (
    JsonOption,
    Progress,
    SystemPromptFile,
    ToolsFile,
    ToolsModule,
    fail,
    load_settings,
    pinned_tools_module,
    print_json,
    run_async,
    stored_candidates,
    with_progress,
)
from cli.exit_codes import EXIT_BROKEN
from models import ReplayMode

#: the end states of a replay that are a failed result (exit code 1)
FAILED_STATES = ("FAILED", "CANCELED")

app = typer.Typer()
replay_app = typer.Typer(
    help="Replay recorded runs exactly or counterfactually.", no_args_is_help=True
)
app.add_typer(replay_app, name="replay")


if TYPE_CHECKING:
    from models.replay_plans import PlanFields


class Mode(StrEnum):
    recorded = "recorded"
    exact = "exact"
    model_swap = "model-swap"
    prompt_swap = "prompt-swap"
    fork = "fork"


class Miss(StrEnum):
    fail = "fail"
    stub = "stub"
    sandbox_live = "sandbox-live"


MODES = {
    Mode.recorded: ReplayMode.RECORDED,
    Mode.exact: ReplayMode.EXACT,
    Mode.model_swap: ReplayMode.MODEL_SWAP,
    Mode.prompt_swap: ReplayMode.PROMPT_SWAP,
    Mode.fork: ReplayMode.FORK_FROM_STEP,
}


def cli_fields() -> PlanFields:
    """The options each plan field comes from, to name them in a refusal (built when a replay
    is started: the plan records are not imported to show ``--help``)."""
    from models import replay_plans

    return replay_plans.PlanFields(
        mode="--mode",
        prompt="--prompt",
        model="--model",
        from_step="--from-step",
        repeat="--repeat",
        candidate="--candidate",
        max_loop_calls="--max-loop-calls",
        policy="--policy",
        retriever="--retriever",
        substitute_model="--substitute-model",
        system_prompt="--system-prompt-file",
        tools="--tools-file",
        tools_module="--tools-module",
        sandbox_live="--on-fixture-miss sandbox-live",
        deny_approvals="--deny-approval",
        replay_id="--replay-id",
        mode_names={mode: cli.value for cli, mode in MODES.items()},
    )


#: the replay's one budget (with --repeat, shared by all its runs); past it a replay stops
#: cleanly, INCONCLUSIVE for the reason BUDGET
MaxModelCalls = Annotated[
    int | None,
    typer.Option("--max-model-calls", help="Stop cleanly after N live model calls in all."),
]
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", help="Stop cleanly once the model calls used N tokens."),
]
MaxCost = Annotated[
    str | None,
    typer.Option("--max-cost", help="Stop cleanly once the model calls cost this much (a number)."),
]
MaxDuration = Annotated[float | None, typer.Option("--max-duration", help="Seconds in all.")]
#: per replay (each child of --repeat on its own), for tool loops only (imported agents)
MaxLoopCalls = Annotated[
    int | None,
    typer.Option(
        "--max-loop-calls",
        help="A replayed tool loop (imported/ingested agent) stops after N live model calls, "
        "each --repeat child on its own (INCONCLUSIVE, BUDGET); default 6 (an imported "
        "tau-bench run: its own limit, the benchmark's 30), 0 = no cap.",
    ),
]


FromStep = Annotated[
    str | None,
    typer.Option(
        "--from-step",
        help="Regenerate from this step: history before it, it and the steps after re-run.",
    ),
]


@replay_app.command("start")
@run_async
async def replay_start(
    run_id: str,
    mode: Annotated[
        Mode, typer.Option("--mode", help="recorded | exact | model-swap | prompt-swap | fork")
    ] = Mode.recorded,
    prompt: Annotated[str | None, typer.Option(help="Candidate prompt bundle version.")] = None,
    model: Annotated[str | None, typer.Option(help="Candidate model.")] = None,
    substitute_model: Annotated[
        str | None,
        typer.Option(
            "--substitute-model",
            help="Replay with M when the recorded model is not configured (in the manifest).",
        ),
    ] = None,
    from_step: FromStep = None,
    policy: Annotated[str | None, typer.Option(help="Policy version override.")] = None,
    retriever: Annotated[str | None, typer.Option(help="Retriever version override.")] = None,
    deny_approval: Annotated[
        list[str] | None,
        typer.Option("--deny-approval", help="Replay as if CAPABILITY's approval was refused."),
    ] = None,
    repeat: Annotated[
        int, typer.Option(help="Run the replay N times and report the reproduction rate.")
    ] = 1,
    max_model_calls: MaxModelCalls = None,
    max_tokens: MaxTokens = None,
    max_cost: MaxCost = None,
    max_duration: MaxDuration = None,
    max_loop_calls: MaxLoopCalls = None,
    on_fixture_miss: Annotated[
        Miss,
        typer.Option(
            "--on-fixture-miss",
            help="A request with no recorded fixture: fail the replay, answer the declared stub, "
            "or (READ tools that allow it) call the provider live in the sandbox.",
        ),
    ] = Miss.fail,
    simulation: Annotated[
        bool, typer.Option("--simulation", help="Mark as a simulated world.")
    ] = False,
    replay_id: Annotated[
        str | None, typer.Option("--replay-id", help="Use this id (default: generated).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the result.")] = False,
    system_prompt_file: SystemPromptFile = None,
    tools_file: ToolsFile = None,
    tools_module: ToolsModule = None,
    as_json: JsonOption = False,
) -> None:
    """Start a replay of RUN_ID (a Temporal workflow whose id is the replay id); with --wait,
    exit 1 when it ends FAILED or CANCELED."""
    from app.replays import new_plan, parse_budget, parse_miss_policy

    budget = parse_budget(
        max_model_calls=max_model_calls,
        max_tokens=max_tokens,
        max_cost=max_cost,
        max_duration=max_duration,
    )
    plan = new_plan(
        run_id,
        MODES[mode],
        replay_id=replay_id,
        prompt=prompt,
        model=model,
        from_step=from_step,
        policy=policy,
        retriever=retriever,
        deny_approvals=deny_approval,
        repeat=repeat,
        budget=budget,
        miss=parse_miss_policy(on_fixture_miss.value),
        simulation=simulation,
        fields=cli_fields(),
        substitute_model=substitute_model,
        max_loop_calls=max_loop_calls,
        candidates=await stored_candidates(system_prompt_file, tools_file),
        tools_module=pinned_tools_module(tools_module),
    )
    await _start(plan, wait=wait, as_json=as_json)


async def _start(plan: Any, *, wait: bool, as_json: bool) -> None:
    """Start the replay (its every checkable input refused first, exit 2); with ``wait``,
    follow it (a progress bar on a terminal) to its end."""
    import asyncio

    from app.replays import finished_replay_view, start_replay
    from stores.bundle import open_stores
    from worker.catalogs import deployment_catalogs
    from worker.temporal import connect

    run_id = plan.source_run_id
    settings = load_settings()
    async with open_stores(settings.stores) as stores:
        handle = await start_replay(
            lambda: connect(settings),
            stores,
            plan,
            catalogs=deployment_catalogs(settings),
            fields=cli_fields(),
        )
        if not wait:
            view = {"replay_id": plan.replay_id, "status": "CREATED", "source_run_id": run_id}
            print_json(view) if as_json else typer.echo(f"started {plan.replay_id}")
            return
        client: Any = None

        async def poll() -> Progress:
            return _progress_of(
                await replay_progress(client, stores.ledger, plan.replay_id, await _status(handle))
            )

        try:
            # inside the try: the replay is started, so a Ctrl-C while this connects says so
            client = await connect(settings)
            view = await with_progress(
                finished_replay_view(handle, plan.replay_id), poll, f"replay {plan.replay_id}"
            )
        except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels the command, not the replay
            typer.echo(waiting_stopped(plan.replay_id), err=True)
            raise
    print_json(view) if as_json else _print_view(view)
    exit_if_unsuccessful(view)


def waiting_stopped(replay_id: str) -> str:
    """What Ctrl-C during ``--wait`` says: only the waiting stopped; the replay is a workflow
    and goes on (its budget still applies) until it ends or is cancelled."""
    return (
        f"replaybook: stopped waiting; replay {replay_id} continues in Temporal "
        f"(follow it: replaybook replay status {replay_id}; "
        f"cancel it: replaybook replay cancel {replay_id})"
    )


def exit_if_unsuccessful(view: dict[str, Any]) -> None:
    """A replay that ended FAILED or CANCELED is a failed result: exit code 1."""
    if view.get("status") in FAILED_STATES:
        raise typer.Exit(EXIT_BROKEN)


def _print_view(view: dict[str, Any]) -> None:
    """A replay's view as text: the whole outcome once finished, else its status."""
    if "mode" in view and "confidence" in view:
        _print_outcome(view)
        return
    typer.echo(f"{view['replay_id']}: {view['status']}")
    if view.get("reason"):
        typer.echo(f"  reason: {view['reason']}")
    progress = view.get("progress") or {}
    if progress.get("children_total"):
        typer.echo(
            f"  child replays: {progress['children_done']}/{progress['children_total']} done"
        )
    elif progress.get("steps_total") is not None:
        typer.echo(
            f"  steps: {progress['steps_done']} done (the source run has {progress['steps_total']})"
        )


def _print_outcome(view: dict[str, Any]) -> None:
    """The verdict first (with --repeat, the runs' counts under it), then what it rests on:
    the comparison, its differences, the writes blocked."""
    from models.verdicts import summary_line

    typer.echo(
        f"{view['replay_id']}: {view['status']} ({view['mode']}, confidence {view['confidence']}, completeness {view['completeness']})"
    )
    if view.get("verdict"):
        why = f" ({view['verdict_reason']})" if view.get("verdict_reason") else ""
        typer.echo(f"  verdict {view['verdict']}{why}")
    if "summary" in view and summary_line(view["summary"]) != view.get("verdict_reason"):
        typer.echo(f"  {summary_line(view['summary'])}")
    if view.get("reason"):
        typer.echo(f"  reason: {view['reason']}")
    comparison = view.get("comparison")
    if comparison:
        typer.echo(
            f"  same outcome {comparison['same_outcome']}, same tools {comparison['same_tool_sequence']}, "
            f"same side effects {comparison['same_side_effects']}, similarity {comparison['answer_similarity']:.2f}"
        )
        for diff in comparison["diffs"]:
            typer.echo(
                f"  {'CRITICAL ' if diff['critical'] else ''}{diff['type']}: {diff['explanation']}"
            )
            if diff.get("prompt_diff"):  # PROMPT_DRIFT: the recorded → recompiled text
                typer.echo("    " + diff["prompt_diff"].rstrip("\n").replace("\n", "\n    "))
        if comparison.get("diffs_total"):  # a long comparison: the rest is in its artifact
            more = comparison["diffs_total"] - len(comparison["diffs"])
            typer.echo(f"  … {more} more differences in the whole comparison ({comparison['ref']})")
    typer.echo(
        f"  writes blocked {view['writes_blocked']}, executed {view['writes_executed']}, fixture misses {view['fixture_misses']}"
    )
    team = (view.get("manifest") or {}).get("tools_module")
    if team:  # whose code answered the READ misses live, as pinned
        shown = f" ({team['distribution']})" if team.get("distribution") else ""
        typer.echo(f"  tools module {team['module']}@{team['digest']}{shown}")


@replay_app.command("status")
@run_async
async def replay_status(replay_id: str, as_json: JsonOption = False) -> None:
    """The replay's status (from its workflow) and, when finished, its result; while it runs,
    its progress (steps and, with --repeat, child replays done of their total)."""
    from app.replays import replay_view
    from stores.bundle import open_stores
    from worker.temporal import connect

    settings = load_settings()
    client = await connect(settings)
    view = await replay_view(client, replay_id)
    if view["status"] not in ("COMPLETED", *FAILED_STATES):
        async with open_stores(settings.stores) as stores:
            view["progress"] = await replay_progress(client, stores.ledger, replay_id, view)
    print_json(view) if as_json else _print_view(view)
    exit_if_unsuccessful(view)


async def replay_progress(
    client: Any, ledger: Any, replay_id: str, view: dict[str, Any]
) -> dict[str, int | None]:
    """Steps done of the source run's step count (a replay that diverges may take more or
    fewer) and, for a --repeat replay, child replays finished of how many it runs."""
    from temporalio.service import RPCError

    from models import ExecutionEventType

    plan = await _plan_of(client, replay_id)
    done = int(view.get("steps_executed") or 0)
    progress: dict[str, int | None] = {
        "steps_done": done,
        "steps_total": None,
        "children_done": None,
        "children_total": None,
    }
    if plan is None:
        return progress
    events = await ledger.events(plan.source_run_id)
    progress["steps_total"] = sum(1 for e in events if e.type is ExecutionEventType.STEP_STARTED)
    if plan.repeat > 1:
        query = f'ParentWorkflowId = "{replay_id}" AND ExecutionStatus != "Running"'
        try:
            finished = (await client.count_workflows(query)).count
        except RPCError:  # a visibility store without the attribute: what the workflow says
            finished = done
        progress |= {"steps_done": None, "children_done": finished, "children_total": plan.repeat}
    return progress


async def _status(handle: Any) -> dict[str, Any]:
    from app.workflow_queries import query_status
    from models.replay_flow import ReplayProgress

    progress = await query_status(handle, ReplayProgress)
    return dict(progress.model_dump(mode="json"))


def _progress_of(progress: dict[str, int | None]) -> Progress:
    """A bar's (label, done, total): child replays for --repeat, else steps."""
    if progress.get("children_total"):
        return ("child replays", progress["children_done"] or 0, progress["children_total"])
    return ("steps", progress["steps_done"] or 0, progress["steps_total"])


async def _plan_of(client: Any, replay_id: str) -> Any:
    """The plan the replay was started with (its workflow input), or None if unreadable."""
    from models.replay_flow import ReplayWorkflowInput

    handle = client.get_workflow_handle(replay_id)
    async for event in handle.fetch_history_events():
        started = event.workflow_execution_started_event_attributes
        payloads = list(started.input.payloads)
        if not payloads:
            return None
        [value] = await client.data_converter.decode(payloads[:1], [ReplayWorkflowInput])
        return value.plan
    return None


@replay_app.command("cancel")
@run_async
async def replay_cancel(replay_id: str) -> None:
    """Cancel a replay at any point; it ends CANCELED."""
    from app.replays import cancel_replay
    from worker.temporal import connect

    await cancel_replay(await connect(load_settings()), replay_id)
    typer.echo(f"cancel requested for {replay_id}")


@app.command("worker")
def worker_command(
    queue: Annotated[str, typer.Option(help="control | replay | all")] = "all",
) -> None:
    """Run Replaybook's Temporal workers in the foreground (same as ``python -m worker``)."""
    import asyncio
    import contextlib

    from worker.logs import configure_logging
    from worker.temporal import run_workers

    if queue not in ("control", "replay", "all"):
        fail(f"--queue must be control, replay or all, not {queue!r}")
    settings = load_settings()
    configure_logging(settings.log_format)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_workers(settings, queue))
