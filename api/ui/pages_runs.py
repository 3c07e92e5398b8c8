"""Console pages of runs: the list, a run's evidence timeline, its verification, one event
(sanitized; raw for the forensic role with a reason, audited as ``GET …/raw``), and the
actions that start a replay or open an incident (``app.replays``, ``app.incidents``: the
same workflows as the CLI and the API)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import RedirectResponse, Response

from api.auth import OPERATE
from api.routes_runs import read_raw
from api.state import State
from api.ui.web import Reader, html_errors, refused_form, render, validation_reason
from app.console import (
    PAGE_SIZE,
    completeness_view,
    event_view,
    incidents_list,
    run_timeline,
    runs_page,
    verify_view,
)
from app.incidents import new_incident_request, open_incident
from app.replays import new_plan, parse_budget, parse_miss_policy, start_replay
from app.runs import RUN_KINDS
from models import ReplayMode
from models.errors import InvalidInputError
from models.replay_plans import PlanFields

router = APIRouter(prefix="/ui", include_in_schema=False)

#: the replay form's fields, named in refusals as the form names them
FORM_FIELDS = PlanFields(
    mode="mode",
    prompt="candidate_prompt",
    model="candidate_model",
    from_step="from_step",
    repeat="repeat",
    candidate="candidate",
    max_loop_calls="max_loop_calls",
    policy="policy_version",
    retriever="retriever_version",
    substitute_model="substitute_model",
    system_prompt="system_prompt",
    tools="tools",
    deny_approvals="deny_approvals",
    replay_id="replay_id",
    mode_names={mode: mode.value for mode in ReplayMode},
)
Text = Annotated[str, Form()]


@router.get("/runs")
@html_errors
async def runs(
    request: Request,
    state: State,
    _: Reader,
    kind: str = "",
    graph: str = "",
    outcome: str = "",
    since: str = "",
    until: str = "",
    after: str = "",
    limit: Annotated[int, Query(ge=1, le=200)] = PAGE_SIZE,
) -> Response:
    page = await runs_page(
        await state.stores(),
        kind=kind or None,
        graph=graph,
        outcome=outcome,
        since=since,
        until=until,
        after=after,
        limit=limit,
    )
    filters = {"kind": kind, "graph": graph, "outcome": outcome, "since": since, "until": until}
    if limit != PAGE_SIZE:
        filters["limit"] = str(limit)
    return render(request, "runs.html", page=page, filters=filters, kinds=RUN_KINDS)


@router.get("/runs/{run_id}")
@html_errors
async def run(request: Request, run_id: str, state: State, _: Reader) -> Response:
    stores = await state.stores()
    view = await run_timeline(stores, run_id)
    incidents = await incidents_list(stores, source_run_id=run_id)
    modes = [m.value for m in ReplayMode]
    return render(request, "run.html", run=view, modes=modes, incidents=incidents)


@router.get("/runs/{run_id}/completeness")
@html_errors
async def completeness(request: Request, run_id: str, state: State, _: Reader) -> Response:
    view = await completeness_view(await state.stores(), run_id)
    return render(request, "completeness.html", view=view)


@router.get("/runs/{run_id}/verify")
@html_errors
async def verify(
    request: Request, run_id: str, state: State, _: Reader, fragment: bool = False
) -> Response:
    result = await verify_view(await state.stores(), run_id)
    name = "verify_result.html" if fragment else "verify.html"
    return render(request, name, run_id=run_id, result=result)


@router.get("/runs/{run_id}/events/{sequence}")
@html_errors
async def event(request: Request, run_id: str, sequence: int, state: State, _: Reader) -> Response:
    view = await event_view(await state.stores(), run_id, sequence)
    return render(request, "event.html", run_id=run_id, sequence=sequence, view=view, raw=False)


@router.get("/runs/{run_id}/events/{sequence}/raw")
@html_errors
async def raw_event(
    request: Request,
    run_id: str,
    sequence: int,
    state: State,
    principal: Reader,
    reason: str = "",
) -> Response:
    view = await read_raw(await state.stores(), principal, run_id, sequence, reason)
    return render(
        request, "event.html", run_id=run_id, sequence=sequence, view=view, raw=True, reason=reason
    )


def _int(text: str, field: str) -> int | None:
    if not text.strip():
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(
            f"{field} must be a whole number, not {text!r}", field=field
        ) from None


def _number(text: str, field: str) -> float | None:
    if not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        raise InvalidInputError(f"{field} must be a number, not {text!r}", field=field) from None


@router.post("/runs/{run_id}/replay")
@html_errors
async def replay(
    request: Request,
    run_id: str,
    state: State,
    principal: Reader,
    csrf: Text = "",
    mode: Text = "EXACT",
    candidate_prompt: Text = "",
    candidate_model: Text = "",
    from_step: Text = "",
    repeat: Text = "1",
    max_model_calls: Text = "",
    max_tokens: Text = "",
    max_cost: Text = "",
    max_duration: Text = "",
    on_fixture_miss: Text = "fail",
) -> Response:
    if refused := refused_form(request, csrf, principal, OPERATE, "starting a replay"):
        return refused
    if mode not in ReplayMode.__members__:
        raise InvalidInputError(f"mode must be one of {', '.join(ReplayMode)}", field="mode")
    stores = await state.stores()
    plan = new_plan(
        run_id,
        ReplayMode[mode],
        prompt=candidate_prompt or None,
        model=candidate_model or None,
        from_step=from_step or None,
        repeat=_int(repeat, "repeat") or 1,
        budget=parse_budget(
            max_model_calls=_int(max_model_calls, "max_model_calls"),
            max_tokens=_int(max_tokens, "max_tokens"),
            max_cost=max_cost or None,
            max_duration=_number(max_duration, "max_duration"),
        ),
        miss=parse_miss_policy(on_fixture_miss, "on_fixture_miss"),
        fields=FORM_FIELDS,
    )
    await start_replay(state.client, stores, plan, catalogs=state.catalogs(), fields=FORM_FIELDS)
    return RedirectResponse(f"/ui/replays/{plan.replay_id}", status_code=303)


@router.post("/runs/{run_id}/incident")
@html_errors
async def incident(
    request: Request,
    run_id: str,
    state: State,
    principal: Reader,
    csrf: Text = "",
    counterfactuals: Text = "",
    repeat: Text = "3",
    on_fixture_miss: Text = "fail",
) -> Response:
    if refused := refused_form(request, csrf, principal, OPERATE, "opening an incident"):
        return refused
    swaps = []
    for line in counterfactuals.replace(",", "\n").splitlines():
        kind, sep, value = line.strip().partition("=")
        if not line.strip():
            continue
        if not sep or not value.strip():
            raise InvalidInputError(
                f"counterfactual {line.strip()!r} is not KIND=VALUE (e.g. prompt=v18)",
                field="counterfactuals",
            )
        swaps.append((kind.strip(), value.strip()))
    try:
        request_ = new_incident_request(
            run_id,
            swaps,
            repeat=_int(repeat, "repeat") or 1,
            miss_policy=parse_miss_policy(on_fixture_miss, "on_fixture_miss"),
        )
    except ValueError as exc:  # a kind that is not one of the swaps
        reason = validation_reason(exc)
        raise InvalidInputError(f"counterfactuals: {reason}", field="counterfactuals") from None
    await open_incident(state.client, await state.stores(), request_, catalogs=state.catalogs())
    return RedirectResponse(f"/ui/incidents/{request_.incident_id}", status_code=303)
