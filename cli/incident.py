"""``replaybook incident …``, ``signatures``, ``report``, ``regress``: incidents on Temporal."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from cli.common import (
    JsonOption,
    Progress,
    SystemPromptFile,
    ToolsFile,
    ToolsModule,
    load_settings,
    pinned_tools_module,
    print_json,
    run_async,
    stored_candidates,
    with_progress,
)
from cli.exit_codes import EXIT_BROKEN, EXIT_INCONCLUSIVE
from models.errors import InvalidInputError

#: the options each record field comes from, to name them in a refusal
RESOLUTION_OPTIONS = {
    "side_effect_id": "SIDE_EFFECT_ID",
    "outcome": "--outcome",
    "evidence": "--evidence",
    "resolved_by": "--by",
}
CONFIRMATION_OPTIONS = {
    "root_cause": "--root-cause",
    "fix_version": "--fix-version",
    "verified_by": "--verified-by",
    "replay_ids": "--replay",
}


def non_blank(text: str) -> str:
    """Blank text is empty text: the rule ``must not be empty`` then names the option."""
    return text if text.strip() else ""


def require_text(**options: str) -> None:
    """Refuse blank options before anything is contacted (``--root-cause must not be empty``);
    keys are option names with ``_`` for ``-``."""
    for name, value in options.items():
        if not value.strip():
            option = "--" + name.replace("_", "-")
            raise InvalidInputError(f"{option} must not be empty", field=option)


#: the incident's one budget, shared by all its replays (no limit unless given)
MaxModelCalls = Annotated[
    int | None, typer.Option("--max-model-calls", help="Model calls for all its replays together.")
]
MaxTokens = Annotated[
    int | None, typer.Option("--max-tokens", help="Tokens for all its replays together.")
]
MaxCost = Annotated[
    str | None, typer.Option("--max-cost", help="Cost (decimal) for all its replays together.")
]
MaxDuration = Annotated[
    float | None, typer.Option("--max-duration", help="Seconds for all its replays together.")
]

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


RetryNotApplied = Annotated[
    bool,
    typer.Option(
        "--retry-not-applied",
        help="After reconciling, retry each side effect proved NOT applied (SideEffectRetry).",
    ),
]
WatchCleanRuns = Annotated[
    int,
    typer.Option(
        "--watch-clean-runs",
        help="After the report, watch new runs with the fix version until N are clean "
        "(WATCHING; a recurrence reopens a linked incident). 0: no watch.",
    ),
]
#: every replay of the incident calls this model instead of the recorded one
SubstituteModel = Annotated[
    str | None,
    typer.Option(
        "--substitute-model",
        help="Every replay calls this registered model instead of the recorded one "
        "(pinned in each replay's manifest and named in the report).",
    ),
]
CandidateModel = Annotated[
    str | None, typer.Option("--model", help="A model counterfactual (model=M).")
]


async def _candidate_pairs(
    model: str | None, system_prompt_file: Path | None, tools_file: Path | None
) -> list[tuple[str, str]]:
    """The candidates of any agent besides ``--counterfactual``: a model, and a tool-loop
    run's system prompt and tool catalogue (stored as artifacts, named by digest)."""
    pairs = [("model", model)] if model else []
    return pairs + list((await stored_candidates(system_prompt_file, tools_file)).items())


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
    incident_id: Annotated[
        str | None, typer.Option("--incident-id", help="Use this id (default: generated).")
    ] = None,
    max_model_calls: MaxModelCalls = None,
    max_tokens: MaxTokens = None,
    max_cost: MaxCost = None,
    max_duration: MaxDuration = None,
    retry_not_applied: RetryNotApplied = False,
    fork_points: Annotated[
        int,
        typer.Option(
            "--fork-points",
            help="Fork-replay the top K ranked fork points with each counterfactual (0: none), "
            "before the whole-run counterfactuals.",
        ),
    ] = 0,
    fork_first: Annotated[
        bool,
        typer.Option(
            "--fork-first",
            help="With --fork-points: the fork replays instead of the whole-run counterfactuals.",
        ),
    ] = False,
    watch_clean_runs: WatchCleanRuns = 0,
    watch_days: Annotated[float, typer.Option("--watch-days", help="Longest watch.")] = 14.0,
    substitute_model: SubstituteModel = None,
    model: CandidateModel = None,
    system_prompt_file: SystemPromptFile = None,
    tools_file: ToolsFile = None,
    tools_module: ToolsModule = None,
    as_json: JsonOption = False,
) -> None:
    """Open an incident for RUN_ID: starts the Incident workflow (id = incident id). Its
    replays share one budget (no limit unless given)."""
    from app.incidents import new_incident_request, parse_candidates
    from app.replays import parse_budget, parse_miss_policy
    from models.replay_plans import CANDIDATE_KINDS

    pairs = parse_candidates(counterfactual, "--counterfactual", CANDIDATE_KINDS)
    pairs += await _candidate_pairs(model, system_prompt_file, tools_file)
    miss = parse_miss_policy(on_fixture_miss)
    settings = load_settings()
    budget = parse_budget(
        max_model_calls=max_model_calls,
        max_tokens=max_tokens,
        max_cost=max_cost,
        max_duration=max_duration,
    )
    request = new_incident_request(
        run_id,
        pairs,
        incident_id=incident_id,
        repeat=repeat,
        miss_policy=miss,
        budget=budget,
        retry_not_applied=retry_not_applied,
        fork_points=fork_points,
        fork_first=fork_first,
        fork_names=("--fork-first", "--fork-points"),
        watch_clean_runs=watch_clean_runs,
        watch_days=watch_days,
        substitute_model=substitute_model or None,
        tools_module=pinned_tools_module(tools_module),
    )
    await _open(settings, request)
    view = {"incident_id": request.incident_id, "source_run_id": run_id, "phase": "FREEZING"}
    print_json(view) if as_json else typer.echo(f"opened {request.incident_id} for {run_id}")


async def _open(settings: Any, request: Any) -> None:
    """Open the incident; a used id or an unknown counterfactual is refused first (exit 2)."""
    from app.incidents import open_incident
    from stores.bundle import open_stores
    from worker.catalogs import deployment_catalogs
    from worker.temporal import connect

    async with open_stores(settings.stores) as stores:
        await open_incident(
            lambda: connect(settings),
            stores,
            request,
            catalogs=deployment_catalogs(settings),
            id_field="--incident-id",
            candidate_field="--counterfactual",
            substitute_field="--substitute-model",
            tools_module_field="--tools-module",
        )


@incident_app.command("status")
@run_async
async def incident_status(incident_id: str, as_json: JsonOption = False) -> None:
    """Phase, signature, replays with rates, and the human tasks it waits for."""
    from app.alerts import incident_alerts
    from app.incidents import incident_status_view
    from stores.bundle import open_stores
    from worker.temporal import connect

    settings = load_settings()
    data = await incident_status_view(await connect(settings), incident_id)
    async with open_stores(settings.stores) as stores:
        data["alerts"] = await incident_alerts(stores, incident_id)
    if as_json:
        print_json(data)
    else:
        _print_incident(incident_id, data)
        for alert in data["alerts"]:
            typer.echo(
                f"  alert {alert['fingerprint']} ({alert['alertname'] or '-'}, "
                f"{alert['matched_by']}={alert['matched_value']}): {alert['action']}, "
                f"{alert['deliveries']} deliveries"
            )
    if data["phase"] == "FAILED":
        raise typer.Exit(EXIT_BROKEN)


def _print_incident(incident_id: str, data: dict[str, Any]) -> None:
    from models.verdicts import summary_line

    typer.echo(f"{incident_id}: {data['phase']}  signature {data['signature'] or '-'}")
    for r in data["replays"]:
        # over the conclusive runs, as the JSON's rate: an inconclusive run showed nothing
        shown = summary_line(r) if r.get("runs") else "not measured yet"
        typer.echo(f"  {r['label']:<16} {r['replay_id']}  {r['status']}  {shown}")
    if data.get("watch"):
        w = data["watch"]
        typer.echo(
            f"  watch: {{runs_with_fix: {w['runs_with_fix']}, recurrences: {w['recurrences']}}}"
            + (f"  reopened as {w['reopened_incident_id']}" if w["reopened_incident_id"] else "")
        )
    for point in data.get("fork_points") or ():
        forks = [f for f in data.get("fork_results") or () if f["step_id"] == point["step_id"]]
        shown = ", ".join(
            f"{f['label'].split(' ', 1)[1]} {f['reproduced']}/{f['runs']}" for f in forks
        )
        typer.echo(
            f"  fork point {point['step_id']:<12} score {point['score']:>2}  "
            f"({', '.join(point['reasons'])}){'  reproduced ' + shown if shown else ''}"
        )
    for p in data["pending"]:
        typer.echo(f"  waiting: {p['detail']}")
    for r in data.get("rejected_signals") or ():
        typer.echo(f"  rejected signal {r['name']} at {r['at']}: {r['reason']}")


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
    from app.incidents import resolve_side_effect
    from models.incident_flow import SideEffectResolution
    from models.validation import validated
    from worker.temporal import connect

    if outcome not in ("applied", "not-applied"):
        raise InvalidInputError(
            f"--outcome must be applied or not-applied, not {outcome!r}", field="--outcome"
        )
    resolution = validated(
        SideEffectResolution,
        RESOLUTION_OPTIONS,
        side_effect_id=side_effect_id,
        outcome=outcome,
        evidence=non_blank(evidence),
        resolved_by=non_blank(by),
    )
    result = await resolve_side_effect(await connect(load_settings()), incident_id, resolution)
    print_json(
        result if isinstance(result, dict) else {"result": str(result)}
    ) if as_json else typer.echo(f"{side_effect_id}: resolved ({outcome})")


@incident_app.command("confirm")
@run_async
async def incident_confirm(
    incident_id: str,
    root_cause: Annotated[
        str, typer.Option("--root-cause", help="The cause, in words, as the replays show it.")
    ],
    fix_version: Annotated[
        str, typer.Option("--fix-version", help="The version that fixes it (e.g. v18).")
    ],
    verified_by: Annotated[str, typer.Option("--verified-by", help="Who confirms it.")],
    replay: Annotated[
        list[str] | None,
        typer.Option(
            "--replay", help="A replay of this incident the cause rests on (default: all of them)."
        ),
    ] = None,
    failure_type: Annotated[
        str | None,
        typer.Option(
            "--failure-type",
            help="The failure type you conclude (MODEL_DECISION, PROMPT, RETRIEVAL, TOOL, "
            "AUTHORITY, APPROVAL, SIDE_EFFECT, STATE, CONCURRENCY, INFRASTRUCTURE, POLICY, DATA); "
            "overrides the automatic one, both are kept.",
        ),
    ] = None,
    expect: Annotated[
        list[str] | None,
        typer.Option(
            "--expect",
            help="What the run must (not) do, e.g. 'no side_effect email.send where to != "
            "ticket.email', 'tool crm.get_customer called before email.send', "
            "'outcome.refund_status == \"RECONCILED\"' (repeatable; docs/incidents.md: expectations).",
        ),
    ] = None,
) -> None:
    """Confirm the root cause (a Temporal update, validated: non-empty, cites replays)."""
    from app.incidents import check_confirmation_inputs, confirm_root_cause
    from worker.temporal import connect

    require_text(root_cause=root_cause, fix_version=fix_version, verified_by=verified_by)
    check_confirmation_inputs(failure_type, expect)
    await confirm_root_cause(
        await connect(load_settings()),
        incident_id,
        root_cause=non_blank(root_cause),
        fix_version=non_blank(fix_version),
        verified_by=non_blank(verified_by),
        replay_ids=replay,
        fields=CONFIRMATION_OPTIONS,
        failure_type=failure_type,
        expectations=expect,
    )
    typer.echo(f"{incident_id}: root cause confirmed by {verified_by}")


@app.command()
@run_async
async def signatures(as_json: JsonOption = False) -> None:
    """Incidents grouped by failure signature, with counts."""
    from app.incidents import signature_groups
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        groups = await signature_groups(stores)
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
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
) -> None:
    """The incident's FailureForensicsReport as JSON, Markdown or a single-file HTML page."""
    from app.incidents import load_report
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        data = await load_report(stores, incident_id, "json" if as_json else fmt)
    if output:
        output.write_bytes(data)
        typer.echo(str(output))
    else:
        typer.echo(data.decode(), nl=False)


# ``replaybook incident report INC --json`` as well (the and the console's wording)
incident_app.command("report")(report)


@regress_app.callback()
def regress(
    ctx: typer.Context,
    candidate: Annotated[
        list[str] | None,
        typer.Option("--candidate", help="prompt=V, model=M, policy=V, retriever=V (repeatable)."),
    ] = None,
    graph: Annotated[
        list[str] | None,
        typer.Option(
            "--graph",
            "--agent",
            help="Gate only this agent's cases (repeatable; default: every agent the candidate "
            "applies to).",
        ),
    ] = None,
    repeat: Annotated[
        str,
        typer.Option(
            help="Replays per case, or auto: as many as catch a regression reproducing at "
            "--rate with probability --power (and let a clean candidate pass)."
        ),
    ] = "5",
    power: Annotated[
        float, typer.Option(help="With --repeat auto: the probability of catching it.")
    ] = 0.9,
    rate: Annotated[
        float, typer.Option(help="With --repeat auto: the reproduction rate to catch.")
    ] = 0.5,
    seeds: Annotated[
        str | None,
        typer.Option(
            help="Replay these sampling seeds (comma-separated, one per repeat; a gate run's "
            "recorded seeds) instead of fresh ones."
        ),
    ] = None,
    threshold: Annotated[
        float | None,
        typer.Option(
            help="The reproduction rate a candidate may show at most (default: the case's "
            "incident counterfactual's 95% upper bound, or 0.10)."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Same as --candidate model=M.")
    ] = None,
    system_prompt_file: SystemPromptFile = None,
    tools_file: ToolsFile = None,
    on_fixture_miss: Annotated[
        str, typer.Option("--on-fixture-miss", help="fail | stub | sandbox-live")
    ] = "sandbox-live",
    tools_module: ToolsModule = None,
    as_json: JsonOption = False,
) -> None:
    """Replay every active regression case of the agents the candidate applies to, with fresh
    seeds (recorded; --seeds replays them). A case passes only when the upper end of the 95%
    Wilson interval of its reproduction rate is at or below its threshold. Exit 0 only if
    every case passes (1: a case fails, 6: a case is inconclusive, 2: bad input)."""
    if ctx.invoked_subcommand is not None:
        return
    from app.regression import GateRepeats

    repeats = GateRepeats.from_flags(repeat, power, rate, seeds, threshold)
    files = (system_prompt_file, tools_file)
    named = [*(candidate or []), *([f"model={model}"] if model else [])]
    _gate(named, graph or [], repeats, on_fixture_miss, as_json, files, tools_module)


@run_async
async def _gate(
    candidate: list[str] | None,
    graphs: list[str],
    repeats: Any,
    on_fixture_miss: str,
    as_json: bool,
    files: tuple[Path | None, Path | None] = (None, None),
    tools_module: str | None = None,
) -> None:
    from app.incidents import parse_candidates
    from app.regression import gated_graphs, run_gate
    from app.replays import parse_miss_policy
    from models.replay_plans import CANDIDATE_KINDS
    from stores.bundle import open_stores
    from worker.catalogs import catalogs

    pairs = parse_candidates(candidate, "--candidate", (*CANDIDATE_KINDS, "graph"))
    pairs += list((await stored_candidates(*files)).items())
    if not pairs:
        raise InvalidInputError(
            "name the candidate: --candidate prompt=V (or model=, policy=, retriever=, "
            "--system-prompt-file, --tools-file)",
            field="--candidate",
        )
    miss = parse_miss_policy(on_fixture_miss)
    team = pinned_tools_module(tools_module)
    settings = load_settings()
    known = catalogs(None, settings.models)
    gated_graphs(known, pairs, graphs)  # an unknown candidate or agent: exit 2 before any work
    seen: dict[str, int | None] = {"done": 0, "total": None}

    def on_case(done: int, total: int) -> None:
        seen.update(done=done, total=total)

    async def poll() -> Progress:
        return ("cases", seen["done"] or 0, seen["total"])

    from worker.temporal import connect

    async with open_stores(settings.stores) as stores:
        gate = run_gate(
            await connect(settings),
            stores,
            pairs,
            repeat=repeats,
            miss=miss,
            catalogs=known,
            graphs=graphs,
            on_case=on_case,
            tools_module=team,
        )
        result = await with_progress(gate, poll, "regression gate")
    print_json(result) if as_json else _print_gate(result)
    if result.get("regressions"):
        raise typer.Exit(EXIT_BROKEN)
    if not result["passed"]:
        raise typer.Exit(EXIT_INCONCLUSIVE)


def _print_gate(result: dict[str, Any]) -> None:
    """Each case with its verdict (PASS, FAIL: a regression, INCONCLUSIVE: no pass, no
    regression) and every distinct reason, then the gate's verdict."""
    shown = {"PASSED": "PASS", "FAILED": "FAIL", "INCONCLUSIVE": "INCONCLUSIVE"}
    for case in result["cases"]:
        verdict = case.get("verdict") or ("PASSED" if case["passed"] else "FAILED")
        typer.echo(f"{shown[verdict]}  {case['case_id']}  ({case['incident_id']})")
        if "threshold" in case:
            low, high = case["ci95"]
            decide = case.get("repeats_to_decide")
            typer.echo(
                f"      reproduced {case['reproduced']}/{case['conclusive']} conclusive "
                f"(95% Wilson {low:.2f}-{high:.2f}; threshold {case['threshold']:.2f}, "
                f"{case['threshold_source']})"
                + (f"; about {decide} conclusive repeats would decide" if decide else "")
            )
            typer.echo(f"      seeds {','.join(str(s) for s in case['seeds'])}")
        reasons = dict.fromkeys(f"{f['assertion']}: {f['reason']}" for f in case["failures"])
        reasons |= dict.fromkeys(
            f"inconclusive replay {i['replay_id']}: {i['reason']}"
            for i in case.get("inconclusive", ())
        )
        for reason in reasons:
            typer.echo(f"      {reason}")
    graphs = ", ".join(result.get("graphs") or []) or "all agents"
    inconclusive = result.get("inconclusive") or 0
    typer.echo(
        "regression gate "
        + ("passed" if result["passed"] else "FAILED")
        + f" ({len(result['cases'])} cases of {graphs}"
        + (
            f"; {result.get('regressions', 0)} regressions, {inconclusive} inconclusive"
            if not result["passed"]
            else ""
        )
        + ")"
    )


@regress_app.command("retire")
@run_async
async def regress_retire(
    case_id: str, reason: Annotated[str, typer.Option(help="Why the case no longer applies.")]
) -> None:
    """Retire a regression case (it stays on record, inactive)."""
    from app.incidents import retire_case
    from stores.bundle import open_stores

    async with open_stores(load_settings().stores) as stores:
        await retire_case(stores, case_id, reason)
    typer.echo(f"retired {case_id}")
