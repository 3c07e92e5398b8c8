"""``replaybook replay start | status | cancel``: replays as Temporal workflows."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from models import FixtureMissPolicy, ReplayBudget, ReplayMode
from models.errors import ConflictError, InvalidInputError, NotFoundError
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle


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


@dataclass(frozen=True)
class PlanFields:
    """How a caller names the plan's inputs, so that an error names the field it typed."""

    mode: str
    prompt: str
    model: str
    from_step: str
    repeat: str
    mode_names: Mapping[ReplayMode, str]


CLI_FIELDS = PlanFields(
    mode="--mode",
    prompt="--prompt",
    model="--model",
    from_step="--from-step",
    repeat="--repeat",
    mode_names={mode: cli.value for cli, mode in MODES.items()},
)


def invalid(field: str, message: str) -> InvalidInputError:
    """An ``InvalidInputError`` that also carries the name of the offending field."""
    error = InvalidInputError(message)
    error.field = field  # type: ignore[attr-defined]
    return error


def build_plan(
    run_id: str,
    mode: ReplayMode,
    *,
    replay_id: str | None = None,
    prompt: str | None = None,
    model: str | None = None,
    from_step: str | None = None,
    policy: str | None = None,
    retriever: str | None = None,
    deny_approval: list[str] | None = None,
    repeat: int = 1,
    budget: ReplayBudget = ReplayBudget(),
    miss: FixtureMissPolicy = FixtureMissPolicy.FAIL,
    simulation: bool = False,
    sampling_seed: int | None = None,
    fields: PlanFields = CLI_FIELDS,
) -> ReplayPlan:
    """Check that the inputs fit the mode (each mismatch named in the caller's ``fields``
    vocabulary: CLI flags or API fields) and build the plan."""
    f = fields
    if mode is ReplayMode.PROMPT_SWAP and not prompt:
        raise invalid(f.prompt, f"{f.mode} {f.mode_names[mode]} needs {f.prompt}")
    if mode is ReplayMode.MODEL_SWAP and not model:
        raise invalid(f.model, f"{f.mode} {f.mode_names[mode]} needs {f.model}")
    if mode is ReplayMode.FORK_FROM_STEP and not from_step:
        raise invalid(f.from_step, f"{f.mode} {f.mode_names[mode]} needs {f.from_step}")
    if from_step and mode is not ReplayMode.FORK_FROM_STEP:
        fork = f.mode_names[ReplayMode.FORK_FROM_STEP]
        raise invalid(f.from_step, f"{f.from_step} is only for {f.mode} {fork}")
    if mode is ReplayMode.RECORDED and (prompt or model):
        raise invalid(
            f.prompt if prompt else f.model,
            f"{f.mode} {f.mode_names[mode]} replays the recorded model answers: "
            f"{f.prompt}/{f.model} need a live mode",
        )
    if repeat < 1 or repeat > 1000:
        raise invalid(f.repeat, f"{f.repeat} must be between 1 and 1000, not {repeat}")
    replay_id = replay_id or f"replay-{uuid.uuid4().hex[:12]}"
    return ReplayPlan(
        replay_id=replay_id,
        source_run_id=run_id,
        mode=mode,
        prompt_version=prompt,
        model_name=model,
        policy_version=policy,
        retriever_version=retriever,
        deny_approvals=tuple(deny_approval or ()),
        from_step=from_step,
        miss_policy=miss,
        budget=budget,
        repeat=repeat,
        simulation=simulation,
        sampling_seed=sampling_seed
        if sampling_seed is not None
        else int(uuid.uuid4().int % 1_000_000),
    )


async def start_replay(client: Client, plan: ReplayPlan) -> WorkflowHandle[Any, ReplayOutcome]:
    """Start the ``Replay`` workflow (id = replay id); the caller has checked the source run."""
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from workflows.replay import ReplayWorkflow

    try:
        return await client.start_workflow(
            ReplayWorkflow.run,
            ReplayWorkflowInput(plan=plan),
            id=plan.replay_id,
            task_queue=CONTROL_QUEUE,
        )
    except WorkflowAlreadyStartedError:
        raise ConflictError(f"replay {plan.replay_id!r} already exists") from None


async def replay_view(client: Client, replay_id: str) -> dict[str, Any]:
    """The replay's status (from its workflow) and, when finished, its result."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    from models.replay_flow import ReplayProgress

    handle = client.get_workflow_handle(replay_id, result_type=ReplayOutcome)
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise NotFoundError(f"replay not found: {replay_id!r} ({exc.message})") from None
    if description.status == WorkflowExecutionStatus.COMPLETED:
        return outcome_view(await handle.result())
    if description.status == WorkflowExecutionStatus.RUNNING:
        progress = await handle.query("status", result_type=ReplayProgress)
        return {"replay_id": replay_id, **progress.model_dump(mode="json")}
    name = description.status.name if description.status else "UNKNOWN"
    return {
        "replay_id": replay_id,
        "status": "CANCELED" if name in ("CANCELED", "TERMINATED") else "FAILED",
        "workflow_status": name,
    }


async def cancel_replay(client: Client, replay_id: str) -> None:
    """Ask a running replay to stop; it ends CANCELED. Unknown → ``NotFoundError``, already
    finished → ``ConflictError`` (Temporal would accept the request and do nothing)."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(replay_id)
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise NotFoundError(f"replay not found: {replay_id!r} ({exc.message})") from None
    if description.status != WorkflowExecutionStatus.RUNNING:
        name = description.status.name if description.status else "UNKNOWN"
        raise ConflictError(f"replay {replay_id!r} has already finished ({name})")
    try:
        await handle.cancel()
    except RPCError as exc:
        raise ConflictError(f"cannot cancel replay {replay_id!r}: {exc.message}") from None


def outcome_view(outcome: ReplayOutcome) -> dict[str, Any]:
    comparison = outcome.comparison
    view: dict[str, Any] = {
        "replay_id": outcome.replay_id,
        "source_run_id": outcome.source_run_id,
        "mode": outcome.mode.value,
        "status": outcome.status.value,
        "confidence": outcome.confidence.value,
        "completeness": outcome.completeness,
        "comparison": None
        if comparison is None
        else {**comparison.model_dump(mode="json"), "critical": comparison.critical},
        "reproduced": outcome.reproduced,
        "writes_blocked": outcome.writes_blocked,
        "writes_executed": outcome.writes_executed,
        "fixture_misses": outcome.fixture_misses,
        "steps_executed": outcome.steps_executed,
        "budget_used": outcome.budget_used.model_dump(mode="json"),
        "partial": outcome.partial,
        "reason": outcome.reason,
        "simulation": outcome.simulation,
        # how the steps were isolated (rule 16); null for replays recorded before it was kept
        "isolation": outcome.isolation,
    }
    if outcome.summary is not None:
        view["summary"] = outcome.summary
        view["children"] = list(outcome.children)
    return view


@replay_app.command("start")
@run_async
async def replay_start(
    run_id: str,
    mode: Annotated[
        Mode, typer.Option("--mode", help="recorded | exact | model-swap | prompt-swap | fork")
    ] = Mode.recorded,
    prompt: Annotated[str | None, typer.Option(help="Candidate prompt bundle version.")] = None,
    model: Annotated[str | None, typer.Option(help="Candidate model.")] = None,
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
    from stores.bundle import require_run
    from worker.temporal import connect

    try:
        cost = Decimal(max_cost) if max_cost is not None else None
    except InvalidOperation:
        raise InvalidInputError(f"--max-cost must be a number, not {max_cost!r}") from None
    for name, value in (
        ("--max-model-calls", max_model_calls),
        ("--max-tokens", max_tokens),
        ("--max-duration", max_duration),
    ):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must not be negative")
    budget = ReplayBudget(
        max_model_calls=max_model_calls,
        max_tokens=max_tokens,
        max_cost=cost,
        max_duration=timedelta(seconds=max_duration) if max_duration is not None else None,
    )
    plan = build_plan(
        run_id,
        MODES[mode],
        replay_id=replay_id,
        prompt=prompt,
        model=model,
        from_step=from_step,
        policy=policy,
        retriever=retriever,
        deny_approval=deny_approval,
        repeat=repeat,
        budget=budget,
        miss=FixtureMissPolicy(on_fixture_miss.value.upper().replace("-", "_")),
        simulation=simulation,
    )
    settings = load_settings()
    await require_run(settings, run_id)
    handle = await start_replay(await connect(settings), plan)
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
    if "summary" in view:
        s = view["summary"]
        typer.echo(
            f"  reproduced {s['reproduced']}/{s['runs']} (rate {s['rate']:.2f}, 95% CI {s['ci95'][0]:.2f}-{s['ci95'][1]:.2f})"
        )


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
