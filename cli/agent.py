"""CLI commands that run agents and touch their side effects: ``agent``, ``side-effects``,
``examples``."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from cli.common import JsonOption, load_settings, print_json, run_async
from models import SideEffectRecord

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
    as_json: JsonOption = False,
) -> None:
    """Run an agent live against its (simulated) providers and record the run as evidence."""
    from examples.support_desk.providers import SimulatedWorld
    from examples.support_desk.spec import run_scenario
    from models.errors import InvalidInputError
    from stores.bundle import open_stores
    from worker.agents import KNOWN_AGENTS

    if agent not in KNOWN_AGENTS:
        raise InvalidInputError(f"unknown agent {agent!r} (known: {', '.join(KNOWN_AGENTS)})")
    async with open_stores(load_settings()) as stores:
        world = SimulatedWorld(stores.db)
        result = await run_scenario(
            world, stores.ledger, stores.artifacts, scenario, prompt_version=prompt, seed=seed
        )
        effects: list[SideEffectRecord] = await stores.evidence.records(
            SideEffectRecord, result.run_id
        )
        verification = await stores.ledger.verify(result.run_id)
    view = {
        "run_id": result.run_id,
        "agent": agent,
        "scenario": scenario,
        "prompt": prompt,
        "seed": seed,
        "status": result.status.value,
        "outcome": result.outcome,
        "steps": result.steps,
        "event_count": verification.event_count,
        "side_effects": [
            {"id": e.side_effect_id, "capability": e.capability_id, "status": e.status.value}
            for e in effects
        ],
    }
    if as_json:
        print_json(view)
        return
    typer.echo(
        f"recorded {result.run_id}: {result.status.value} {json.dumps(result.outcome, sort_keys=True)}"
    )
    for e in view["side_effects"]:
        typer.echo(f"  side effect {e['id']} {e['capability']} {e['status']}")


@side_effects_app.command("retry")
@run_async
async def side_effects_retry(side_effect_id: str, as_json: JsonOption = False) -> None:
    """Retry a write, only if it is proved not applied (FAILED, or RECONCILED not applied).

    An UNKNOWN side effect is refused with exit 3 (reconciliation required) before anything
    reaches the provider."""
    from runtime.recorder import RunRecorder
    from runtime.side_effects import retry_side_effect
    from runtime.tools import ToolCallContext
    from stores.bundle import open_stores
    from worker.agents import tool_providers_for

    async with open_stores(load_settings()) as stores:
        record: SideEffectRecord = await stores.evidence.record(SideEffectRecord, side_effect_id)
        run = await stores.ledger.get_run(record.run_id)
        recorder = RunRecorder(stores.ledger, stores.artifacts, record.run_id)
        recorder.step_id = record.step_id
        arguments = await _recorded_arguments(stores, record)

        async def call(key: str, preq: str) -> dict:
            providers = await tool_providers_for(run.graph_id, stores.db)
            context = ToolCallContext(record.run_id, recorder.logical_time(), key, preq)
            return await providers[record.capability_id](arguments, context)

        final, receipt = await retry_side_effect(stores.evidence, recorder, side_effect_id, call)
    view = {"side_effect_id": side_effect_id, "status": final.status.value, "receipt": receipt}
    if as_json:
        print_json(view)
    else:
        typer.echo(f"{side_effect_id}: {final.status.value}")


async def _recorded_arguments(stores, record: SideEffectRecord) -> dict:  # type: ignore[no-untyped-def]
    """The exact arguments of the recorded action: the policy decision whose input hash is the
    action hash holds them."""
    from sqlalchemy import select

    from models import PolicyDecisionRecord
    from models.errors import NotFoundError
    from stores.sql import schema

    table = schema.policy_decisions
    async with stores.db.read() as conn:
        rows = (
            await conn.execute(
                select(table.c.sequence, table.c.record).where(table.c.run_id == record.run_id)
            )
        ).all()
    for row in rows:
        decision = PolicyDecisionRecord.model_validate(row.record)
        if decision.input_hash == record.action_hash and isinstance(decision.sanitized_input, dict):
            # the stored input is the sanitized view: the provider needs the raw arguments,
            # read (with the KEK, audited) from the encrypted raw payload of that decision
            raw = await stores.privacy.read_raw_evidence(
                record.run_id,
                row.sequence,
                actor="side-effects-retry",
                reason=f"retry of side effect {record.side_effect_id} proved not applied",
            )
            return dict(raw.content["sanitized_input"]["arguments"])
    raise NotFoundError(f"the arguments of side effect {record.side_effect_id} are not recorded")


@examples_app.command("providers")
@run_async
async def examples_providers(as_json: JsonOption = False) -> None:
    """The simulated providers' state: refunds (with provider request ids and counts), emails
    sent (with recipients), calls per operation."""
    from examples.support_desk.providers import SimulatedWorld
    from stores.bundle import open_stores

    async with open_stores(load_settings()) as stores:
        world = SimulatedWorld(stores.db)
        await world.ensure()
        state = await world.state()
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
