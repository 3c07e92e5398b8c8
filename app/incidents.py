"""Incidents as Temporal ``Incident`` workflows: open, follow, settle what they wait for
(side-effect resolutions, the root-cause confirmation), read reports and signatures, retire
regression cases. The CLI and the HTTP API call these functions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.candidates import tool_loop_problem
from app.replay_checks import (
    Catalogs,
    candidate_problem,
    check_candidates,
    check_incident_id_free,
    check_tools_module,
)
from app.replays import ClientSource, check_source_run, workflow_status_name
from app.workflow_queries import query_status
from models.enums import AgentFailureType
from models.errors import ConflictError, InvalidInputError, NotFoundError
from models.expectations import parse_expectation
from models.incident_flow import (
    Counterfactual,
    IncidentRequest,
    IncidentView,
    RootCauseConfirmation,
    SideEffectResolution,
)
from models.queues import CONTROL_QUEUE
from models.validation import validated

if TYPE_CHECKING:
    from temporalio.client import Client, WorkflowHandle

    from stores.bundle import Stores


def new_incident_request(
    run_id: str,
    counterfactuals: list[tuple[str, str]],
    *,
    incident_id: str | None = None,
    fork_names: tuple[str, str] = ("fork_first", "fork_points"),
    **options: Any,
) -> IncidentRequest:
    """The request that opens an incident for ``run_id`` (id drawn unless given);
    ``fork_names``: what the caller calls ``fork_first`` and ``fork_points`` (for the error)."""
    from activities.incident import new_incident_id

    if options.get("fork_first") and not options.get("fork_points"):
        first, points = fork_names
        raise InvalidInputError(
            f"{first} needs {points} K > 0: it runs the top K fork replays instead of the "
            "whole-run counterfactuals",
            field=first,
        )
    return IncidentRequest(
        incident_id=incident_id or new_incident_id(),
        source_run_id=run_id,
        counterfactuals=tuple(
            Counterfactual.model_validate({"kind": k, "value": v}) for k, v in counterfactuals
        ),
        **options,
    )


def parse_candidates(
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


async def incident_handle(client: Client, incident_id: str) -> WorkflowHandle[Any, IncidentView]:
    """The incident's workflow handle; ``NotFoundError`` when no such incident was opened."""
    from temporalio.service import RPCError

    handle = client.get_workflow_handle(incident_id, result_type=IncidentView)
    try:
        await handle.describe()
    except RPCError as exc:
        raise NotFoundError(f"incident not found: {incident_id!r} ({exc.message})") from None
    return handle


async def open_incident(
    client: ClientSource,
    stores: Stores,
    request: IncidentRequest,
    *,
    source_field: str | None = None,
    catalogs: Catalogs | None = None,
    id_field: str = "incident_id",
    candidate_field: str = "counterfactuals",
    substitute_field: str = "substitute_model",
    tools_module_field: str = "tools_module",
) -> None:
    """Check the request, then connect (``client``) and start the ``Incident`` workflow (id =
    incident id). Before any connection to Temporal: an unknown run is ``RunNotFoundError``,
    or ``InvalidInputError`` naming ``source_field``; an incident id already recorded is
    ``ConflictError`` naming it (``id_field``); a counterfactual the run's agent does not know
    (``catalogs``) is ``InvalidInputError`` naming ``candidate_field``, an unknown substitute
    model one naming ``substitute_field``. Temporal refuses an id
    any workflow ever had (``REJECT_DUPLICATE``): a finished incident is never replaced."""
    from temporalio.common import WorkflowIDReusePolicy
    from temporalio.exceptions import WorkflowAlreadyStartedError

    from workflows.incident import IncidentWorkflow

    await check_source_run(stores.ledger, request.source_run_id, source_field)
    await check_incident_id_free(stores, request.incident_id, id_field)
    run = await stores.ledger.get_run(request.source_run_id)
    catalog = (catalogs or {}).get(run.graph_id)
    for cf in request.counterfactuals:  # a system prompt or tool catalogue: tool loops only
        if problem := tool_loop_problem(run.graph_id, cf.kind):
            raise InvalidInputError(
                f"{candidate_field} {cf.kind}: {problem}", field=candidate_field
            )
    check_candidates(catalog, [(c.kind, c.value) for c in request.counterfactuals], candidate_field)
    substitute = request.substitute_model
    if substitute and catalog is not None:  # every replay of the incident calls it
        if problem := candidate_problem(catalog, "model", substitute):
            raise InvalidInputError(
                f"{substitute_field} {substitute}: {problem}", field=substitute_field
            )
    if request.tools_module is not None:  # every replay's misses answered by the team's tools
        swapped = tuple(cf.value for cf in request.counterfactuals if cf.kind == "tools")
        await check_tools_module(
            stores, run, request.tools_module, swapped, tools_module_field, request.miss_policy
        )
    connected = await client()
    try:
        await connected.start_workflow(
            IncidentWorkflow.run,
            request,
            id=request.incident_id,
            task_queue=CONTROL_QUEUE,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        status = await workflow_status_name(connected, request.incident_id)
        raise ConflictError(
            f"{id_field} {request.incident_id}: incident {request.incident_id!r} already "
            f"exists (workflow {status}); choose another id",
            field=id_field,
        ) from None


async def incident_status_view(client: Client, incident_id: str) -> dict[str, Any]:
    """The ``status`` query as JSON: phase, signature, replays with rates, pending tasks."""
    handle = await incident_handle(client, incident_id)
    view = await query_status(handle, IncidentView)
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
        # the validator's own words, not "ValueError: …" (the cause is an ApplicationError)
        raise ConflictError(
            f"refused: {getattr(exc.cause, 'message', None) or exc.cause}"
        ) from None
    except RPCError as exc:
        raise ConflictError(f"refused: {exc.message}") from None


async def resolve_side_effect(
    client: Client, incident_id: str, resolution: SideEffectResolution
) -> Any:
    """Settle an UNKNOWN side effect no reconciler could (the ``resolve_side_effect`` update)."""
    return await _update(
        await incident_handle(client, incident_id), "resolve_side_effect", resolution
    )


def check_confirmation_inputs(failure_type: str | None, expectations: list[str] | None) -> None:
    """A failure type that is not one of the 12, or an expectation that does not parse, is bad
    input (exit 2 / 422), said before any round trip to Temporal."""
    if failure_type is not None and failure_type not in AgentFailureType.__members__:
        raise InvalidInputError(
            f"--failure-type {failure_type!r}: expected one of {', '.join(AgentFailureType)}",
            field="failure_type",
        )
    for text in expectations or ():
        try:
            parse_expectation(text)
        except InvalidInputError as exc:
            raise InvalidInputError(str(exc), field="expectations") from None


async def confirm_root_cause(
    client: Client,
    incident_id: str,
    *,
    root_cause: str,
    fix_version: str,
    verified_by: str,
    replay_ids: list[str] | None = None,
    failure_type: str | None = None,
    expectations: list[str] | None = None,
    fields: Mapping[str, str] | None = None,
) -> RootCauseConfirmation:
    """The human's confirmation (the ``confirm_root_cause`` update, validated by the workflow:
    non-empty, cites replays of this incident — all of them when ``replay_ids`` is empty —,
    parsable expectations, and at least one when the failure yields no built-in assertion).
    ``failure_type``: one of the 12 types, overriding the automatic one (both are kept).
    ``fields`` names the caller's inputs in a refusal (``{"root_cause": "--root-cause"}``)."""
    check_confirmation_inputs(failure_type, expectations)
    handle = await incident_handle(client, incident_id)
    view = await query_status(handle, IncidentView)
    cited = tuple(replay_ids or (r.replay_id for r in (view.replays if view else ())))
    confirmation = validated(
        RootCauseConfirmation,
        fields or {},
        root_cause=root_cause,
        fix_version=fix_version,
        verified_by=verified_by,
        replay_ids=cited,
        failure_type=failure_type,
        expectations=tuple(expectations or ()),
    )
    await _update(handle, "confirm_root_cause", confirmation)
    return confirmation


REPORT_FORMATS = ("json", "md", "html")


async def load_report(stores: Stores, incident_id: str, fmt: str) -> bytes:
    """The stored ``FailureForensicsReport`` rendering; ``ConflictError`` before it exists."""
    if fmt not in REPORT_FORMATS:
        raise InvalidInputError(f"--format must be json, md or html, not {fmt!r}")
    incident = await stores.incidents.get_incident(incident_id)
    refs = (incident.record or {}).get("report_refs")
    ref = refs.get(fmt) if isinstance(refs, dict) else None
    if not isinstance(ref, str):
        raise ConflictError(f"incident {incident_id} has no report yet (phase {incident.phase})")
    return await stores.artifacts.get(ref)


def view_json(view: IncidentView) -> dict[str, Any]:
    data = view.model_dump(mode="json")
    data["phase"] = view.phase.value
    data["signature"] = view.signature.signature if view.signature else None
    # the human's type wins once confirmed; the automatic one is kept beside it
    data["failure_type"] = view.failure_type
    data["failure_type_confirmed"] = view.failure_type_confirmed
    data["automatic_failure_type"] = view.automatic_failure_type
    data["classified_failure_type"] = view.automatic_failure_type  # its earlier name
    if view.watch is not None:
        # the recurrence watch as ``incident status`` shows it (the cursor stays in the view)
        data["watch"] = {
            "runs_with_fix": view.watch.runs_with_fix,
            "recurrences": view.watch.recurrences,
            "reopened_incident_id": view.watch.reopened_incident_id,
        }
    data["replays"] = [
        {
            "replay_id": r.replay_id,
            "label": r.label,
            "mode": r.mode.value,
            "status": r.status,
            "rate": r.rate,
            "reproduced": r.reproduced,
            "not_reproduced": r.not_reproduced,
            "inconclusive": r.inconclusive,
            "inconclusive_reasons": r.inconclusive_reasons,
            "runs": r.runs,
            "ci95": r.ci95,
            "confidence": r.confidence.value,
            # "not established" when a run was inconclusive (issue 16)
            "established": r.established,
        }
        for r in view.replays
    ]
    return data


async def signature_groups(stores: Stores) -> list[dict[str, Any]]:
    """Incidents grouped by failure signature, with counts."""
    return await stores.incidents.signature_groups()


async def retire_case(stores: Stores, case_id: str, reason: str) -> None:
    """Retire a regression case: it stays on record, inactive."""
    await stores.incidents.retire_case(case_id, reason, datetime.now(UTC))
