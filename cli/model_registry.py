"""``replaybook models list``: the model registry (``runtime.providers.registry``)."""

from __future__ import annotations

import typer

from cli.common import JsonOption, load_settings, print_json, run_async

app = typer.Typer()

models_app = typer.Typer(
    help="The model registry: the local models of `replaybook dev up` and REPLAYBOOK_MODELS.",
    no_args_is_help=True,
)
app.add_typer(models_app, name="models")


@models_app.command("list")
@run_async
async def models_list(as_json: JsonOption = False) -> None:
    """Each registered model (endpoint, model id, prices, context length), whether it answers
    a one-token question and the measured latency."""
    from app.model_registry import list_models

    rows = await list_models(load_settings().model_registry)
    if as_json:
        print_json({"models": rows})
        return
    if not rows:
        typer.echo("no models registered (run `replaybook dev up` or set REPLAYBOOK_MODELS)")
        return
    for r in rows:
        state = (
            f"answers in {r['latency_ms']:.0f} ms" if r["answers"] else f"NO ANSWER: {r['error']}"
        )
        typer.echo(
            f"{r['name']:<16} {r['source']:<10} {r['model_id']} @ {r['base_url']}  "
            f"{r['price_per_1k_input']}/{r['price_per_1k_output']} per 1k in/out  "
            f"ctx {r['context_length']}  {state}"
        )
