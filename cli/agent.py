"""CLI commands that run agents and touch their side effects: ``agent``, ``side-effects``,
``examples``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.common import JsonOption, load_settings, print_json, run_async

app = typer.Typer()

agent_app = typer.Typer(help="Run agents live and record them.", no_args_is_help=True)
side_effects_app = typer.Typer(help="The side-effect ledger.", no_args_is_help=True)
examples_app = typer.Typer(help="The reference agent's simulated world.", no_args_is_help=True)
app.add_typer(agent_app, name="agent")
app.add_typer(side_effects_app, name="side-effects")
app.add_typer(examples_app, name="examples")


@agent_app.command("run")
@run_async
async def agent_run(
    agent: Annotated[str, typer.Argument(help="The agent to run: support-desk.")],
    scenario: Annotated[
        str, typer.Option(help="happy | wrong-customer | refund-timeout")
    ] = "happy",
    prompt: Annotated[str, typer.Option(help="Prompt bundle version: v17 | v18.")] = "v17",
    seed: Annotated[
        int, typer.Option(help="Seed of the run's randomness (and the scripted model's).")
    ] = 0,
    model: Annotated[
        str | None,
        typer.Option(
            help="A registered model (`replaybook models list`), e.g. gemma3-270m; default: "
            "the scripted stand-in."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Run an agent live against its (simulated) providers and record the run as evidence."""
    from app.agents import run_agent
    from stores.bundle import open_stores
    from worker.agents import agent_runners, open_world

    settings = load_settings()
    runners = agent_runners(open_world(settings.stores.database_url), settings.model_registry)
    async with open_stores(settings.stores) as stores:
        view = await run_agent(
            stores, runners, agent, scenario=scenario, prompt=prompt, seed=seed, model=model
        )
    if as_json:
        print_json(view)
        return
    typer.echo(
        f"recorded {view['run_id']}: {view['status']} {json.dumps(view['outcome'], sort_keys=True)}"
    )
    for e in view["side_effects"]:
        typer.echo(f"  side effect {e['id']} {e['capability']} {e['status']}")


@side_effects_app.command("retry")
@run_async
async def side_effects_retry(side_effect_id: str, as_json: JsonOption = False) -> None:
    """Retry a write, only if it is proved not applied (FAILED, or RECONCILED not applied).

    Starts (or joins) the Temporal workflow SideEffectRetry whose id is the side effect id: it
    verifies the run, checks again, executes the write once with its original idempotency key
    and records the result. An UNKNOWN side effect is refused with exit 3 (reconciliation
    required) before anything reaches Temporal or the provider."""
    from app.side_effects import retry_durably
    from stores.bundle import open_stores
    from worker.temporal import connect

    settings = load_settings()
    async with open_stores(settings.stores) as stores:
        view = await retry_durably(lambda: connect(settings), stores, side_effect_id)
    if as_json:
        print_json(view)
    else:
        typer.echo(
            f"{side_effect_id}: {view['status']} (workflow SideEffectRetry {side_effect_id})"
        )


@examples_app.command("providers")
@run_async
async def examples_providers(as_json: JsonOption = False) -> None:
    """The simulated providers' state: refunds (with provider request ids and counts), emails
    sent (with recipients), calls per operation."""
    from app.agents import world_state
    from examples.support_desk.providers import SimulatedWorld
    from worker.agents import open_world

    state = await world_state(SimulatedWorld(open_world(load_settings().stores.database_url)))
    if as_json:
        print_json(state)
        return
    typer.echo("simulated providers (SIMULATION)")
    for r in state["refunds"]:
        typer.echo(
            f"  refund {r['refund_id']} order={r['order_id']} {r['amount']} {r['currency']} request={r['provider_request_id']} (refunds for order: {r['count_for_order']})"
        )
    for e in state["emails"]:
        typer.echo(f"  email {e['message_id']} to={e['to']} subject={e['subject']!r}")
    for name, count in sorted(state["calls"].items()):
        typer.echo(f"  calls {name}: {count}")


@side_effects_app.command("sweep")
@run_async
async def side_effects_sweep(as_json: JsonOption = False) -> None:
    """Mark UNKNOWN every side effect left EXECUTING past its lease
    (REPLAYBOOK_SIDE_EFFECT_LEASE_SECONDS, 60 by default): the process that dispatched it died
    before recording the outcome, so the write may have happened. UNKNOWN effects go to
    reconciliation (an incident, or `incident resolve-side-effect`), never to a retry."""
    from app.side_effects import sweep_expired
    from stores.bundle import open_stores

    settings = load_settings()
    lease = settings.stores.database.side_effect_lease_seconds
    async with open_stores(settings.stores) as stores:
        swept = await sweep_expired(stores, lease)
    rows = [
        {
            "id": r.side_effect_id,
            "run_id": r.run_id,
            "capability": r.capability_id,
            "status": r.status.value,
            "evidence": r.provider_receipt,
        }
        for r in swept
    ]
    if as_json:
        print_json({"lease_seconds": lease, "swept": rows, "count": len(rows)})
        return
    typer.echo(f"{len(rows)} side effect(s) past the {lease:g} s lease marked UNKNOWN")
    for row in rows:
        typer.echo(f"  {row['id']} {row['capability']} (run {row['run_id']}): UNKNOWN")
