"""``replaybook import``: record runs of foreign agents (tau-bench, OpenTelemetry GenAI spans)
through the ingestion core. Idempotent: importing a file again records nothing new."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer

from cli.common import JsonOption, Progress, load_settings, print_json, run_async, with_progress

if TYPE_CHECKING:  # the stores are imported when a command runs, not to show --help
    from stores.bundle import Stores


class ImportReport(Protocol):
    def to_json(self) -> dict[str, Any]: ...


app = typer.Typer()

#: ``--write-tools`` of the span importers (OTel, OpenInference)
WriteToolsOption = Annotated[
    str | None,
    typer.Option(help="Comma-separated tools that are writes (the others are reads)."),
]

import_app = typer.Typer(
    help="Import runs recorded by other agent frameworks.", no_args_is_help=True
)
app.add_typer(import_app, name="import")


async def _elapsed() -> Progress:
    """An import reports nothing until it ends: the bar shows that it runs and for how long."""
    return ("", 0, None)


def _tool_list(write_tools: str | None) -> list[str] | None:
    """``--write-tools a,b`` as a list (None when not given: the importer decides)."""
    return [w.strip() for w in write_tools.split(",") if w.strip()] if write_tools else None


async def _import(
    file: Path, as_json: bool, importer: Callable[[Stores], Coroutine[Any, Any, ImportReport]]
) -> None:
    """What every ``import`` command does around its importer: open the stores, show the
    elapsed-time bar while it runs, print its report (text or JSON) with the seconds taken."""
    from stores.bundle import open_stores

    started = time.perf_counter()
    async with open_stores(load_settings().stores) as stores:
        report = await with_progress(importer(stores), _elapsed, f"importing {file.name}")
    _print(report.to_json(), as_json, time.perf_counter() - started)


def _print(report: dict[str, Any], as_json: bool, seconds: float) -> None:
    report = {**report, "seconds": round(seconds, 3)}
    if as_json:
        print_json(report)
        return
    typer.echo(
        f"{report['runs']} runs from {report['source']}: {report['imported']} imported, "
        f"{report['already_imported']} already imported ({report['events_recorded']} events, "
        f"{report['seconds']}s)"
    )
    for run_id in report["run_ids"]:
        typer.echo(run_id)
    for note in report["opaque"]:
        typer.echo(f"kept as opaque: {note}", err=True)


@import_app.command("tau-bench")
@run_async
async def import_tau_bench_command(
    file: Annotated[Path, typer.Argument(help="A tau-bench runs file (JSON list of runs).")],
    domain: Annotated[str, typer.Option(help="airline | retail (any domain of the tools file).")],
    tools_info: Annotated[
        Path, typer.Option("--tools-info", help="Tool schemas and write tools (tools_info.json).")
    ],
    tools_commit: Annotated[
        str | None, typer.Option(help="Which commit's schemas to use (default: the last listed).")
    ] = None,
    env_version: Annotated[
        str | None,
        typer.Option(
            help="The benchmark commit whose databases the runs were recorded against (e.g. "
            "7362a17), kept with each run for `forensics world` (default: --tools-commit)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """One run per (task_id, trial): model calls, tool fixtures, user turns, side effects."""
    from integrations.tau_bench.importer import import_tau_bench

    await _import(
        file,
        as_json,
        lambda stores: import_tau_bench(
            stores.ledger,
            stores.artifacts,
            stores.evidence,
            file,
            domain,
            tools_info,
            tools_commit,
            env_version,
        ),
    )


@import_app.command("tau2-bench")
@run_async
async def import_tau2_bench_command(
    file: Annotated[Path, typer.Argument(help="A tau2-bench results file (Results JSON).")],
    tools_info: Annotated[
        Path | None,
        typer.Option("--tools-info", help="Tool schemas and write tools (tau-bench's format)."),
    ] = None,
    write_tools: Annotated[
        str | None,
        typer.Option(
            help="Without --tools-info: comma-separated write tools of the file's tool_defs."
        ),
    ] = None,
    domain: Annotated[
        str | None, typer.Option(help="Default: info.environment_info.domain_name.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """One run per simulation (task, trial): messages, reward_info, termination_reason."""
    from integrations.tau2_bench.importer import import_tau2_bench

    writes = _tool_list(write_tools)
    await _import(
        file,
        as_json,
        lambda stores: import_tau2_bench(
            stores.ledger, stores.artifacts, stores.evidence, file, tools_info, writes, domain
        ),
    )


@import_app.command("otel")
@run_async
async def import_otel_command(
    file: Annotated[Path, typer.Argument(help='Spans: {"spans": [...]}, a list, or OTLP JSON.')],
    write_tools: WriteToolsOption = None,
    as_json: JsonOption = False,
) -> None:
    """One run per trace: gen_ai model calls, tool executions; unknown spans kept as opaque."""
    from ingest.otel import import_otel

    writes = _tool_list(write_tools)
    await _import(
        file,
        as_json,
        lambda stores: import_otel(stores.ledger, stores.artifacts, stores.evidence, file, writes),
    )


@import_app.command("openinference")
@run_async
async def import_openinference_command(
    file: Annotated[Path, typer.Argument(help='Spans: {"spans": [...]}, a list, or OTLP JSON.')],
    write_tools: WriteToolsOption = None,
    as_json: JsonOption = False,
) -> None:
    """One run per trace of OpenInference spans (Arize Phoenix): LLM, TOOL, AGENT/CHAIN spans."""
    from ingest.openinference import import_openinference

    writes = _tool_list(write_tools)
    await _import(
        file,
        as_json,
        lambda stores: import_openinference(
            stores.ledger, stores.artifacts, stores.evidence, file, writes
        ),
    )
