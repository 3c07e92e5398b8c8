"""Replays as Temporal ``Replay`` workflows: plan, start, follow, cancel, and the views the
CLI and the HTTP API render. Both faces call these functions, so both behave alike."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from app.replay_checks import Catalogs, check_replay_plan
from app.workflow_queries import query_status
from models import FixtureMissPolicy, ReplayBudget, ReplayMode, ReplayStatus
from models.errors import ConflictError, InvalidInputError, NotFoundError, RunNotFoundError
from models.queues import CONTROL_QUEUE
from models.replay_flow import ReplayOutcome, ReplayPlan, ReplayWorkflowInput
from models.replay_plans import PLAN_FIELDS, PlanFields, build_replay_plan
from models.tools_module import ToolsModulePin
from models.verdicts import outcome_summary, repeat_verdict
from runtime.ports import EventLedger

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

    from stores.bundle import Stores

#: how an operation gets its Temporal client: called only once the input has been checked
ClientSource = Callable[[], Awaitable["Client"]]


def new_replay_id(prefix: str = "replay") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def new_sampling_seed() -> int:
    return int(uuid.uuid4().int % 1_000_000)


def new_plan(
    run_id: str,
    mode: ReplayMode,
    *,
    replay_id: str | None = None,
    sampling_seed: int | None = None,
    prompt: str | None = None,
    model: str | None = None,
    from_step: str | None = None,
    policy: str | None = None,
    retriever: str | None = None,
    deny_approvals: list[str] | tuple[str, ...] | None = None,
    repeat: int = 1,
    budget: ReplayBudget | None = None,
    miss: FixtureMissPolicy = FixtureMissPolicy.FAIL,
    simulation: bool = False,
    fields: PlanFields = PLAN_FIELDS,
    substitute_model: str | None = None,
    max_loop_calls: int | None = None,
    candidates: dict[str, str] | None = None,
    tools_module: ToolsModulePin | None = None,
) -> ReplayPlan:
    """A plan for a new replay: ``build_replay_plan`` with a fresh id and sampling seed
    unless the caller chose them; ``candidates``: a tool-loop run's stored candidate system
    prompt and tool catalogue (``app.candidates.store_candidates``)."""
    return build_replay_plan(
        run_id,
        mode,
        replay_id=replay_id or new_replay_id(),
        sampling_seed=sampling_seed if sampling_seed is not None else new_sampling_seed(),
        prompt=prompt,
        model=model,
        from_step=from_step,
        policy=policy,
        retriever=retriever,
        deny_approvals=tuple(deny_approvals or ()),
        repeat=repeat,
        budget=budget,
        miss=miss,
        simulation=simulation,
        fields=fields,
        substitute_model=substitute_model,
        max_loop_calls=max_loop_calls,
        system_prompt=(candidates or {}).get("system_prompt"),
        tools=(candidates or {}).get("tools"),
        tools_module=tools_module,
    )


def parse_miss_policy(text: str, field: str = "--on-fixture-miss") -> FixtureMissPolicy:
    """``fail | stub | sandbox-live`` (any case, ``-`` or ``_``) as a ``FixtureMissPolicy``."""
    name = text.upper().replace("-", "_")
    if name not in FixtureMissPolicy.__members__:
        raise InvalidInputError(
            f"{field} must be fail, stub or sandbox-live, not {text!r}", field=field
        )
    return FixtureMissPolicy[name]


#: the longest ``--max-duration``: 30 days, as the API's ``maxDuration`` (``inf`` or 1e300
#: fit no timedelta)
_LONGEST_SECONDS = 30 * 24 * 3600


def parse_budget(
    *,
    max_model_calls: int | None = None,
    max_tokens: int | None = None,
    max_cost: str | None = None,
    max_duration: float | None = None,
) -> ReplayBudget:
    """A budget from command-line values, each checked and named (``--max-cost`` …)."""
    try:
        cost = Decimal(max_cost) if max_cost is not None else None
    except InvalidOperation:
        raise InvalidInputError(
            f"--max-cost must be a number, not {max_cost!r}", field="--max-cost"
        ) from None
    for name, value in (
        ("--max-model-calls", max_model_calls),
        ("--max-tokens", max_tokens),
        ("--max-duration", max_duration),
    ):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must not be negative", field=name)
    if max_duration is not None and not max_duration <= _LONGEST_SECONDS:  # inf, nan, 1e300
        raise InvalidInputError(
            f"--max-duration must be a number of seconds up to {_LONGEST_SECONDS} (30 days), "
            f"not {max_duration:g}",
            field="--max-duration",
        )
    return ReplayBudget(
        max_model_calls=max_model_calls,
        max_tokens=max_tokens,
        max_cost=cost,
        max_duration=timedelta(seconds=max_duration) if max_duration is not None else None,
    )


async def check_source_run(ledger: EventLedger, run_id: str, source_field: str | None) -> None:
    """``RunNotFoundError`` for an unknown run, or ``InvalidInputError`` naming
    ``source_field`` when the caller names the run in a request body."""
    try:
        await ledger.get_run(run_id)
    except RunNotFoundError as exc:
        if source_field is None:
            raise
        raise InvalidInputError(str(exc), field=source_field) from None


async def start_replay(
    client: ClientSource,
    stores: Stores,
    plan: ReplayPlan,
    *,
    source_field: str | None = None,
    catalogs: Catalogs | None = None,
    fields: PlanFields = PLAN_FIELDS,
) -> WorkflowHandle[Any, ReplayOutcome]:
    """Check the request, then connect (``client``) and start the ``Replay`` workflow (id =
    replay id). Before any connection to Temporal: an unknown run is ``RunNotFoundError``, or
    ``InvalidInputError`` naming ``source_field`` when the caller names the run in a request
    body; a used replay id is ``ConflictError``; every input ``check_replay_plan`` judges
    (with the deployment's ``catalogs``) is refused naming its field in ``fields``. Temporal
    refuses an id any workflow ever had (``REJECT_DUPLICATE``), not only a running one."""
    from temporalio.common import WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from workflows.replay import ReplayWorkflow

    await check_source_run(stores.ledger, plan.source_run_id, source_field)
    await check_replay_plan(stores, plan, catalogs, fields)
    connected = await client()
    try:
        return await connected.start_workflow(
            ReplayWorkflow.run,
            ReplayWorkflowInput(plan=plan),
            id=plan.replay_id,
            task_queue=CONTROL_QUEUE,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        status = await workflow_status_name(connected, plan.replay_id)
        raise ConflictError(
            f"{fields.replay_id} {plan.replay_id}: replay {plan.replay_id!r} already exists "
            f"(workflow {status}); choose another id",
            field=fields.replay_id,
        ) from None


async def workflow_status_name(client: Client, workflow_id: str) -> str:
    """The status of the workflow that holds ``workflow_id`` (``RUNNING``, ``COMPLETED`` …)."""
    from temporalio.service import RPCError

    try:
        status = (await client.get_workflow_handle(workflow_id).describe()).status
    except RPCError:
        return "UNKNOWN"
    return status.name if status else "UNKNOWN"


async def replay_view(client: Client, replay_id: str) -> dict[str, Any]:
    """The replay's status (from its workflow) and, when finished, its result: a view that says
    COMPLETED, FAILED or CANCELED is always the finished one, with the result's fields."""
    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    from models.replay_flow import ReplayProgress

    handle = client.get_workflow_handle(replay_id, result_type=ReplayOutcome)
    try:
        description = await handle.describe()
    except RPCError as exc:
        raise NotFoundError(f"replay not found: {replay_id!r} ({exc.message})") from None
    if description.status == WorkflowExecutionStatus.RUNNING:
        progress = await query_status(handle, ReplayProgress)
        if progress.status not in _ENDED:
            return {"replay_id": replay_id, **progress.model_dump(mode="json")}
        # the workflow has settled how it ends but has not closed yet (the task returning its
        # outcome, or the activity closing its run, is on its way): wait for the close
        return await _closed_view(handle, replay_id)
    return await _closed_view(handle, replay_id, description.status)


#: the statuses a replay's progress ends in
_ENDED = frozenset((ReplayStatus.COMPLETED, ReplayStatus.FAILED, ReplayStatus.CANCELED))


async def _closed_view(
    handle: WorkflowHandle[Any, ReplayOutcome],
    replay_id: str,
    status: WorkflowExecutionStatus | None = None,
) -> dict[str, Any]:
    """A closed replay's view (``status`` as described, or waited for when None): its outcome
    when the workflow completed, else CANCELED or FAILED with the workflow's status."""
    from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

    from workflows.failure_cause import failure_cause

    failure: WorkflowFailureError | None = None
    if status is None or status == WorkflowExecutionStatus.COMPLETED:
        try:
            return outcome_view(await handle.result())
        except WorkflowFailureError as exc:
            # canceled, failed, terminated or timed out while it was being waited for
            failure = exc
            status = (await handle.describe()).status
    elif status == WorkflowExecutionStatus.FAILED:
        try:
            await handle.result()
        except WorkflowFailureError as exc:
            failure = exc
    name = status.name if status else "UNKNOWN"
    view: dict[str, Any] = {
        "replay_id": replay_id,
        "status": "CANCELED" if name in ("CANCELED", "TERMINATED") else "FAILED",
        "workflow_status": name,
    }
    if failure is not None and name == "FAILED":
        # the worker's error, not the wrapper's "Activity task failed"
        view["reason"] = failure_cause(failure)
    return view


async def finished_replay_view(
    handle: WorkflowHandle[Any, ReplayOutcome], replay_id: str
) -> dict[str, Any]:
    """What a waiter (``replay start --wait``) shows once the replay's workflow closes: the
    view ``replay status`` shows, so a replay cancelled (or terminated) from elsewhere reads
    CANCELED to both, never "FAILED: Workflow cancelled"."""
    return await _closed_view(handle, replay_id)


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
    """A finished replay as the CLI's ``--json`` and the API show it."""
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
        # REPRODUCED | NOT_REPRODUCED | INCONCLUSIVE (a --repeat parent's from its runs' counts)
        "verdict": outcome.verdict.value if outcome.verdict else None,
        "inconclusive_reason": (
            outcome.inconclusive_reason.value if outcome.inconclusive_reason else None
        ),
        "verdict_reason": outcome.verdict_reason,
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
        # what it was bound to: the model profile it called and the one the run recorded, a
        # --substitute-model, the prompt bundle and versions (null before manifests were kept)
        "manifest": outcome.manifest.model_dump(mode="json") if outcome.manifest else None,
    }
    if outcome.counterfactual_reward is not None or outcome.counterfactual_reason is not None:
        # an imported tau-bench run replayed live: the benchmark's reward 0/1 and why
        view["counterfactual_reward"] = outcome.counterfactual_reward
        view["counterfactual_reason"] = outcome.counterfactual_reason
    if outcome.summary is not None:
        view["summary"] = outcome.summary
        if outcome.verdict is None:  # a --repeat parent: one verdict over its runs
            verdict, why = repeat_verdict(outcome_summary(outcome))
            view["verdict"], view["verdict_reason"] = verdict.value, why
        # each child with its verdict and what it drew from the request's one budget
        view["children"] = (
            [child.model_dump(mode="json") for child in outcome.child_results]
            if outcome.child_results
            else [{"replay_id": child} for child in outcome.children]
        )
    return view
