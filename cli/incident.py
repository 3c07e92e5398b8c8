"""``replaybook incident …``, ``signatures``, ``report``, ``regress``: incidents on Temporal."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from models import FixtureMissPolicy
from models.errors import ConflictError, InvalidInputError, NotFoundError
from models.incident_flow import (
    Counterfactual,
    IncidentRequest,
    IncidentView,
    RootCauseConfirmation,
    SideEffectResolution,
)
from models.queues import CONTROL_QUEUE

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from stores.bundle import Stores


app = typer.Typer()
incident_app = typer.Typer(
    help="Incidents: freeze, reconcile, sign, replay, confirm, report.", no_args_is_help=True
)
regress_app = typer.Typer(
    help="The regression gate: every active incident case against a candidate.",
    invoke_without_command=True,
)
app.add_typer(incident_app, name="incident")
app.add_typer(regress_app, name="regress")


def parse_pairs(
    values: list[str] | None, what: str, allowed: tuple[str, ...]
) -> list[tuple[str, str]]:
    pairs = []
    for value in values or []:
        kind, sep, item = value.partition("=")
        if not sep or not item or kind not in allowed:
            raise InvalidInputError(
                f"{what} {value!r}: expected KIND=VALUE with KIND one of {', '.join(allowed)}"
            )
        pairs.append((kind, item))
    return pairs


def parse_miss_policy(text: str) -> FixtureMissPolicy:
    name = text.upper().replace("-", "_")
    if name not in FixtureMissPolicy.__members__:
        raise InvalidInputError(
            f"--on-fixture-miss must be fail, stub or sandbox-live, not {text!r}"
        )
    return FixtureMissPolicy[name]


async def incident_handle(client: Client, incident_id: str) -> WorkflowHandle[Any, IncidentView]:
    """The incident's workflow handle; ``NotFoundError`` when no such incident was opened."""
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(incident_id, result_type=IncidentView)
    try:
        await handle.describe()
    except RPCError as exc:
        raise NotFoundError(f"incident not found: {incident_id!r} ({exc.message})") from None
    return handle


async def open_incident(client: Client, request: IncidentRequest) -> None:
    """Start the ``Incident`` workflow (id = incident id); the caller has checked the run."""
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from workflows.incident import IncidentWorkflow

    try:
        await client.start_workflow(
            IncidentWorkflow.run, request, id=request.incident_id, task_queue=CONTROL_QUEUE
        )
    except WorkflowAlreadyStartedError:
        raise ConflictError(f"incident {request.incident_id!r} already exists") from None


async def incident_status_view(client: Client, incident_id: str) -> dict[str, Any]:
    """The ``status`` query as JSON: phase, signature, replays with rates, pending tasks."""
    handle = await incident_handle(client, incident_id)
    view = await handle.query("status", result_type=IncidentView)
    if view is None:
        raise NotFoundError(f"incident {incident_id} has not started yet")
    return view_json(view)


async def _update(handle: WorkflowHandle[Any, IncidentView], name: str, arg: Any) -> Any:
    """A Temporal update; a refusal by its validator (or a finished incident) is a conflict
    with what the incident is waiting for."""
    from temporalio.client import WorkflowUpdateFailedError
    from temporalio.service import RPCError

    try:
        return await handle.execute_update(name, arg)
    except WorkflowUpdateFailedError as exc:
        raise ConflictError(f"refused: {exc.cause}") from None
    except RPCError as exc:
        raise ConflictError(f"refused: {exc.message}") from None


async def resolve_side_effect(
    client: Client, incident_id: str, resolution: SideEffectResolution
) -> Any:
    """Settle an UNKNOWN side effect no reconciler could (the ``resolve_side_effect`` update)."""
    return await _update(
        await incident_handle(client, incident_id), "resolve_side_effect", resolution
    )


async def confirm_root_cause(
    client: Client,
    incident_id: str,
    *,
    root_cause: str,
    fix_version: str,
    verified_by: str,
    replay_ids: list[str] | None = None,
) -> RootCauseConfirmation:
    """The human's confirmation (the ``confirm_root_cause`` update, validated by the workflow:
    non-empty, cites replays of this incident — all of them when ``replay_ids`` is empty)."""
    handle = await incident_handle(client, incident_id)
    view = await handle.query("status", result_type=IncidentView)
    cited = tuple(replay_ids or (r.replay_id for r in (view.replays if view else ())))
    try:
        confirmation = RootCauseConfirmation(
            root_cause=root_cause,
            fix_version=fix_version,
            verified_by=verified_by,
            replay_ids=cited,
        )
    except ValueError as exc:
        raise InvalidInputError(f"refused: {exc}") from None
    await _update(handle, "confirm_root_cause", confirmation)
    return confirmation


REPORT_FORMATS = ("json", "md", "html")


async def load_report(stores: Stores, incident_id: str, fmt: str) -> bytes:
    """The stored ``FailureForensicsReport`` rendering; ``ConflictError`` before it exists."""
    from stores.sql.incidents import SqlIncidentStore

    if fmt not in REPORT_FORMATS:
        raise InvalidInputError(f"--format must be json, md or html, not {fmt!r}")
    incident = await SqlIncidentStore(stores.db).get_incident(incident_id)
    refs = (incident.record or {}).get("report_refs") or {}
    if fmt not in refs:
        raise ConflictError(f"incident {incident_id} has no report yet (phase {incident.phase})")
    return await stores.artifacts.get(refs[fmt])


def view_json(view: IncidentView) -> dict[str, Any]:
    data = view.model_dump(mode="json")
    data["phase"] = view.phase.value
    data["signature"] = view.signature.signature if view.signature else None
    data["failure_type"] = view.signature.failure_type if view.signature else None
    data["replays"] = [
        {
            "replay_id": r.replay_id,
            "label": r.label,
            "mode": r.mode.value,
            "status": r.status,
            "rate": r.rate,
            "reproduced": r.reproduced,
            "runs": r.runs,
            "ci95": r.ci95,
        }
        for r in view.replays
    ]
    return data


@incident_app.command("open")
@run_async
async def incident_open(
    run_id: str,
    counterfactual: Annotated[
        list[str] | None,
        typer.Option(
            "--counterfactual", help="prompt=V, model=M, policy=V or retriever=V (repeatable)."
        ),
    ] = None,
    repeat: Annotated[int, typer.Option(help="Replays per exact and counterfactual replay.")] = 20,
    on_fixture_miss: Annotated[
        str, typer.Option("--on-fixture-miss", help="fail | stub | sandbox-live")
    ] = "fail",
    incident_id: Annotated[str | None, typer.Option("--incident-id")] = None,
    as_json: JsonOption = False,
) -> None:
    """Open an incident for RUN_ID: starts the Incident workflow (id = incident id)."""
    from activities.incident import new_incident_id
    from stores.bundle import require_run
    from worker.temporal import connect

    pairs = parse_pairs(
        counterfactual, "--counterfactual", ("prompt", "model", "policy", "retriever")
    )
    miss = parse_miss_policy(on_fixture_miss)
    settings = load_settings()
    await require_run(settings, run_id)
    request = IncidentRequest(
        incident_id=incident_id or new_incident_id(),
        source_run_id=run_id,
        counterfactuals=tuple(Counterfactual(kind=k, value=v) for k, v in pairs),  # type: ignore[arg-type]
        repeat=repeat,
        miss_policy=miss,
    )
    await open_incident(await connect(settings), request)
    view = {"incident_id": request.incident_id, "source_run_id": run_id, "phase": "FREEZING"}
    print_json(view) if as_json else typer.echo(f"opened {request.incident_id} for {run_id}")


@incident_app.command("status")
@run_async
async def incident_status(incident_id: str, as_json: JsonOption = False) -> None:
    """Phase, signature, replays with rates, and the human tasks it waits for."""
    from worker.temporal import connect

    data = await incident_status_view(await connect(load_settings()), incident_id)
    if as_json:
        print_json(data)
        return
    typer.echo(f"{incident_id}: {data['phase']}  signature {data['signature'] or '-'}")
    for r in data["replays"]:
        typer.echo(
            f"  {r['label']:<16} {r['replay_id']}  {r['status']}  reproduced {r['reproduced']}/{r['runs']}"
        )
    for p in data["pending"]:
        typer.echo(f"  waiting: {p['detail']}")


@incident_app.command("resolve-side-effect")
@run_async
async def incident_resolve(
    incident_id: str,
    side_effect_id: str,
    outcome: Annotated[str, typer.Option(help="applied | not-applied")],
    evidence: Annotated[str, typer.Option(help="What the decision rests on.")],
    by: Annotated[str, typer.Option("--by", help="Who decides.")] = "operator",
    as_json: JsonOption = False,
) -> None:
    """Settle an UNKNOWN side effect no reconciler could (a Temporal update)."""
    from worker.temporal import connect

    if outcome not in ("applied", "not-applied"):
        raise InvalidInputError(f"--outcome must be applied or not-applied, not {outcome!r}")
    resolution = SideEffectResolution(
        side_effect_id=side_effect_id, outcome=outcome, evidence=evidence, resolved_by=by
    )  # type: ignore[arg-type]
    result = await resolve_side_effect(await connect(load_settings()), incident_id, resolution)
    print_json(
        result if isinstance(result, dict) else {"result": str(result)}
    ) if as_json else typer.echo(f"{side_effect_id}: resolved ({outcome})")


@incident_app.command("confirm")
@run_async
async def incident_confirm(
    incident_id: str,
    root_cause: Annotated[str, typer.Option("--root-cause")],
    fix_version: Annotated[str, typer.Option("--fix-version")],
    verified_by: Annotated[str, typer.Option("--verified-by")],
    replay: Annotated[
        list[str] | None,
        typer.Option(
            "--replay", help="A replay of this incident the cause rests on (default: all of them)."
        ),
    ] = None,
) -> None:
    """Confirm the root cause (a Temporal update, validated: non-empty, cites replays)."""
    from worker.temporal import connect

    await confirm_root_cause(
        await connect(load_settings()),
        incident_id,
        root_cause=root_cause,
        fix_version=fix_version,
        verified_by=verified_by,
        replay_ids=replay,
    )
    typer.echo(f"{incident_id}: root cause confirmed by {verified_by}")


@app.command()
@run_async
async def signatures(as_json: JsonOption = False) -> None:
    """Incidents grouped by failure signature, with counts."""
    from stores.bundle import open_stores
    from stores.sql.incidents import SqlIncidentStore

    async with open_stores(load_settings()) as stores:
        groups = await SqlIncidentStore(stores.db).signature_groups()
    if as_json:
        print_json({"signatures": groups})
        return
    for g in groups:
        typer.echo(
            f"{g['count']:>4}  {g['signature']}  ({g['failure_type']})  {', '.join(g['incident_ids'])}"
        )


@app.command()
@run_async
async def report(
    incident_id: str,
    fmt: Annotated[str, typer.Option("--format", help="json | md | html")] = "md",
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to FILE.")] = None,
) -> None:
    """The incident's FailureForensicsReport as JSON, Markdown or a single-file HTML page."""
    from stores.bundle import open_stores

    async with open_stores(load_settings()) as stores:
        data = await load_report(stores, incident_id, fmt)
    if output:
        output.write_bytes(data)
        typer.echo(str(output))
    else:
        typer.echo(data.decode(), nl=False)


@regress_app.callback()
def regress(
    ctx: typer.Context,
    candidate: Annotated[
        list[str] | None,
        typer.Option("--candidate", help="prompt=V, model=M, policy=V, retriever=V (repeatable)."),
    ] = None,
    repeat: Annotated[
        int, typer.Option(help="Replays per case; a case holds only if all hold.")
    ] = 5,
    on_fixture_miss: Annotated[
        str, typer.Option("--on-fixture-miss", help="fail | stub | sandbox-live")
    ] = "sandbox-live",
    as_json: JsonOption = False,
) -> None:
    """Replay every active regression case with the candidate; exit 0 only if every case holds."""
    if ctx.invoked_subcommand is not None:
        return
    _gate(candidate, repeat, on_fixture_miss, as_json)


@run_async
async def _gate(
    candidate: list[str] | None, repeat: int, on_fixture_miss: str, as_json: bool
) -> None:
    from app.regression import run_gate

    pairs = parse_pairs(
        candidate, "--candidate", ("prompt", "model", "policy", "retriever", "graph")
    )
    if not pairs:
        raise InvalidInputError(
            "name the candidate: --candidate prompt=V (or model=, policy=, retriever=)"
        )
    miss = parse_miss_policy(on_fixture_miss)
    result = await run_gate(load_settings(), pairs, repeat=repeat, miss=miss)
    if as_json:
        print_json(result)
    else:
        for case in result["cases"]:
            typer.echo(
                f"{'PASS' if case['passed'] else 'FAIL'}  {case['case_id']}  ({case['incident_id']})"
            )
            for failure in case["failures"][:3]:
                typer.echo(f"      {failure['assertion']}: {failure['reason']}")
        typer.echo(
            "regression gate "
            + ("passed" if result["passed"] else "FAILED")
            + f" ({len(result['cases'])} cases)"
        )
    if not result["passed"]:
        raise typer.Exit(1)


@regress_app.command("retire")
@run_async
async def regress_retire(
    case_id: str, reason: Annotated[str, typer.Option(help="Why the case no longer applies.")]
) -> None:
    """Retire a regression case (it stays on record, inactive)."""
    from datetime import UTC, datetime

    from stores.bundle import open_stores
    from stores.sql.incidents import SqlIncidentStore

    async with open_stores(load_settings()) as stores:
        await SqlIncidentStore(stores.db).retire_case(case_id, reason, datetime.now(UTC))
    typer.echo(f"retired {case_id}")
