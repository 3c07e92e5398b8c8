"""``replaybook replay start | status | cancel``: replays as Temporal workflows."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from app.replays import (
    cancel_replay,
    new_plan,
    outcome_view,
    parse_budget,
    parse_miss_policy,
    replay_view,
    start_replay,
)
from cli.common import JsonOption, load_settings, print_json, run_async
from models import ReplayMode
from models.errors import InvalidInputError
from models.replay_flow import ReplayOutcome
from models.replay_plans import PlanFields
from models.verdicts import summary_line

app = typer.Typer()
replay_app = typer.Typer(
    help="Replay recorded runs exactly or counterfactually.", no_args_is_help=True
)
app.add_typer(replay_app, name="replay")


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


CLI_FIELDS = PlanFields(
    mode="--mode",
    prompt="--prompt",
    model="--model",
    from_step="--from-step",
    repeat="--repeat",
    candidate="--candidate",
    mode_names={mode: cli.value for cli, mode in MODES.items()},
)


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
    from_step: Annotated[
        str | None, typer.Option("--from-step", help="Fork after this step.")
    ] = None,
    policy: Annotated[str | None, typer.Option(help="Policy version override.")] = None,
    retriever: Annotated[str | None, typer.Option(help="Retriever version override.")] = None,
    deny_approval: Annotated[
        list[str] | None,
        typer.Option("--deny-approval", help="Replay as if CAPABILITY's approval was refused."),
    ] = None,
    repeat: Annotated[
        int, typer.Option(help="Run the replay N times and report the reproduction rate.")
    ] = 1,
    max_model_calls: Annotated[int | None, typer.Option("--max-model-calls")] = None,
    max_tokens: Annotated[int | None, typer.Option("--max-tokens")] = None,
    max_cost: Annotated[str | None, typer.Option("--max-cost")] = None,
    max_duration: Annotated[float | None, typer.Option("--max-duration", help="Seconds.")] = None,
    on_fixture_miss: Annotated[Miss, typer.Option("--on-fixture-miss")] = Miss.fail,
    simulation: Annotated[
        bool, typer.Option("--simulation", help="Mark as a simulated world.")
    ] = False,
    replay_id: Annotated[
        str | None, typer.Option("--replay-id", help="Use this id (default: generated).")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the result.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Start a replay of RUN_ID (a Temporal workflow whose id is the replay id)."""
    from stores.bundle import open_stores
    from worker.temporal import connect

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
        fields=CLI_FIELDS,
        substitute_model=substitute_model,
    )
    settings = load_settings()
    async with open_stores(settings.stores) as stores:
        handle = await start_replay(lambda: connect(settings), stores.ledger, plan)
    if not wait:
        view = {"replay_id": plan.replay_id, "status": "CREATED", "source_run_id": run_id}
        print_json(view) if as_json else typer.echo(f"started {plan.replay_id}")
        return
    outcome: ReplayOutcome = await handle.result()
    view = outcome_view(outcome)
    if as_json:
        print_json(view)
    else:
        _print_outcome(view)


def _print_outcome(view: dict[str, Any]) -> None:
    typer.echo(
        f"{view['replay_id']}: {view['status']} ({view['mode']}, confidence {view['confidence']}, completeness {view['completeness']})"
    )
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
    typer.echo(
        f"  writes blocked {view['writes_blocked']}, executed {view['writes_executed']}, fixture misses {view['fixture_misses']}"
    )
    if view.get("verdict"):
        why = f" ({view['verdict_reason']})" if view.get("verdict_reason") else ""
        typer.echo(f"  verdict {view['verdict']}{why}")
    if "summary" in view:
        typer.echo(f"  {summary_line(view['summary'])}")


@replay_app.command("status")
@run_async
async def replay_status(replay_id: str, as_json: JsonOption = False) -> None:
    """The replay's status (from its workflow) and, when finished, its result."""
    from worker.temporal import connect

    view = await replay_view(await connect(load_settings()), replay_id)
    if as_json:
        print_json(view)
    elif "mode" in view:
        _print_outcome(view)
    else:
        typer.echo(f"{replay_id}: {view['status']}")


@replay_app.command("cancel")
@run_async
async def replay_cancel(replay_id: str) -> None:
    """Cancel a replay at any point; it ends CANCELED."""
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
        raise InvalidInputError(f"--queue must be control, replay or all, not {queue!r}")
    settings = load_settings()
    configure_logging(settings.log_format)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_workers(settings, queue))
