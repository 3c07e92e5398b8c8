"""Console pages of replays and incidents: a replay's live status, verdict, budget and its
side-by-side diff; two runs compared; an incident's phases, replays with rates and
intervals, side effects, and the human's confirmation (the same update as the CLI's
``incident confirm``, a refusal shown with its reason); regression cases, SLOs, signatures."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from api.auth import FORENSIC
from api.state import State
from api.ui.web import Reader, html_errors, refused_form, render, validation_reason
from app.alerts import incident_alerts
from app.capsules import list_cases
from app.console import compare_view, incident_side_effects, incidents_list
from app.incidents import (
    confirm_root_cause,
    incident_status_view,
    load_report,
    resolve_side_effect,
    signature_groups,
)
from app.replays import replay_view
from app.slo import compute_slos
from models.errors import ConflictError, InvalidInputError, NotFoundError
from models.incident_flow import SideEffectResolution

router = APIRouter(prefix="/ui", include_in_schema=False)
Text = Annotated[str, Form()]
FINISHED = ("COMPLETED", "FAILED", "CANCELED")
#: the confirmation form's fields, named in refusals
CONFIRM_FIELDS = {
    "root_cause": "root_cause",
    "fix_version": "fix_version",
    "verified_by": "verified_by",
}


@router.get("/replays/{replay_id}")
@html_errors
async def replay(request: Request, replay_id: str, state: State, _: Reader) -> Response:
    view = await replay_view(await state.client(), replay_id)
    diff = None
    if view.get("status") == "COMPLETED" and view.get("source_run_id"):
        children = view.get("children") or []
        other = children[0]["replay_id"] if children else replay_id
        try:
            diff = await compare_view(
                await state.stores(),
                view["source_run_id"],
                other,
                None if children else view.get("comparison"),
            )
        except NotFoundError:
            diff = None
    live = view.get("status") not in FINISHED
    return render(request, "replay.html", replay=view, diff=diff, live=live)


@router.get("/compare")
@html_errors
async def compare(request: Request, state: State, _: Reader, a: str = "", b: str = "") -> Response:
    diff = await compare_view(await state.stores(), a, b) if a and b else None
    return render(request, "compare.html", a=a, b=b, diff=diff)


async def _incident_page(
    request: Request,
    state: State,
    incident_id: str,
    status: int = 200,
    rejection: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    view = await incident_status_view(await state.client(), incident_id)
    stores = await state.stores()
    alerts = await incident_alerts(stores, incident_id)
    truths = await incident_side_effects(stores, view)
    # refreshed while the workflow works on its own: not while a human's form is open
    live = view.get("phase") not in ("COMPLETED", "FAILED", "WATCHING") and not view.get("pending")
    return render(
        request,
        "incident.html",
        status=status,
        incident=view,
        alerts=alerts,
        truths=truths,
        live=live and rejection is None,
        rejection=rejection,
        form=form or {},
    )


@router.get("/incidents")
@html_errors
async def incidents(request: Request, state: State, _: Reader) -> Response:
    return render(request, "incidents.html", incidents=await incidents_list(await state.stores()))


@router.get("/incidents/{incident_id}")
@html_errors
async def incident(request: Request, incident_id: str, state: State, _: Reader) -> Response:
    return await _incident_page(request, state, incident_id)


@router.post("/incidents/{incident_id}/confirm")
@html_errors
async def confirm(
    request: Request,
    incident_id: str,
    state: State,
    principal: Reader,
    csrf: Text = "",
    root_cause: Text = "",
    fix_version: Text = "",
    verified_by: Text = "",
    failure_type: Text = "",
    expectations: Text = "",
    replay_ids: Annotated[list[str] | None, Form()] = None,
) -> Response:
    if refused := refused_form(request, csrf, principal, FORENSIC, "confirming a root cause"):
        return refused
    form = {
        "root_cause": root_cause,
        "fix_version": fix_version,
        "verified_by": verified_by,
        "failure_type": failure_type,
        "expectations": expectations,
        "replay_ids": " ".join(replay_ids or ()),
    }
    try:
        await confirm_root_cause(
            await state.client(),
            incident_id,
            root_cause=root_cause.strip(),
            fix_version=fix_version.strip(),
            verified_by=verified_by.strip(),
            failure_type=failure_type or None,
            expectations=[e.strip() for e in expectations.splitlines() if e.strip()],
            replay_ids=replay_ids or None,
            fields=CONFIRM_FIELDS,
        )
    except (ConflictError, InvalidInputError) as exc:
        code = 409 if isinstance(exc, ConflictError) else 422
        return await _incident_page(request, state, incident_id, code, str(exc), form)
    return RedirectResponse(f"/ui/incidents/{incident_id}", status_code=303)


@router.post("/incidents/{incident_id}/side-effects/{side_effect_id}/resolve")
@html_errors
async def resolve(
    request: Request,
    incident_id: str,
    side_effect_id: str,
    state: State,
    principal: Reader,
    csrf: Text = "",
    outcome: Text = "",
    evidence: Text = "",
    resolved_by: Text = "",
) -> Response:
    if refused := refused_form(request, csrf, principal, FORENSIC, "settling a side effect"):
        return refused
    try:
        resolution = SideEffectResolution(
            side_effect_id=side_effect_id,
            outcome=outcome,
            evidence=evidence,
            resolved_by=resolved_by,
        )
    except ValueError as exc:
        reason = f"refused: {validation_reason(exc)}"
        return await _incident_page(request, state, incident_id, 422, reason)
    try:
        await resolve_side_effect(await state.client(), incident_id, resolution)
    except ConflictError as exc:
        return await _incident_page(request, state, incident_id, 409, str(exc))
    return RedirectResponse(f"/ui/incidents/{incident_id}", status_code=303)


@router.get("/incidents/{incident_id}/report")
@html_errors
async def report(request: Request, incident_id: str, state: State, _: Reader) -> Response:
    data = await load_report(await state.stores(), incident_id, "html")
    # the stored report is self-contained (no link leaving it); served here, it links back
    back = (
        f'<p class="console-link"><a href="/ui/incidents/{quote(incident_id)}">'
        "← this incident in the Replaybook console</a></p>"
    ).encode()
    page = data.replace(b"<body>", b"<body>" + back, 1)
    return Response(page, media_type="text/html; charset=utf-8")


@router.get("/cases")
@html_errors
async def cases(request: Request, state: State, _: Reader) -> Response:
    return render(request, "cases.html", cases=await list_cases(await state.stores()))


@router.get("/slo")
@html_errors
async def slo(request: Request, state: State, _: Reader) -> Response:
    stores = await state.stores()
    result: Any = await compute_slos(stores)
    groups = await signature_groups(stores)
    watching = [i for i in await incidents_list(stores) if i["phase"] == "WATCHING"]
    return render(
        request,
        "slo.html",
        slo=result.model_dump(mode="json"),
        signatures=groups,
        watching=watching,
    )
