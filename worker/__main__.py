"""``python -m worker [--queue control|replay|all]``: run Replaybook's Temporal workers."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from activities.metrics import serve_metrics
from activities.sandbox.config import NO_ISOLATION
from models.errors import ReplaybookError
from runtime.executor import set_default_max_steps
from runtime.manifests import set_image_digest
from worker.logs import configure_logging
from worker.settings import MetricsSettings, Settings, load_settings
from worker.temporal import run_workers


def start_metrics_endpoints(metrics: MetricsSettings) -> None:
    """Replaybook's metrics on ``REPLAYBOOK_METRICS_PORT`` and the Temporal SDK's own (task
    latencies, poll and slot counts, sticky cache…) on ``REPLAYBOOK_TEMPORAL_METRICS_PORT``,
    each only when set. The SDK's metrics come from its Rust core, which serves them itself:
    its runtime must be the default one before any client connects."""
    if metrics.port is not None:
        serve_metrics(metrics.port)
    sdk_port = metrics.temporal_port
    if sdk_port is not None:
        from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

        Runtime.set_default(
            Runtime(
                telemetry=TelemetryConfig(
                    metrics=PrometheusConfig(
                        bind_address=f"0.0.0.0:{sdk_port}", durations_as_seconds=True
                    )
                )
            ),
            error_if_already_set=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    parser.add_argument("--queue", choices=("control", "replay", "all"), default="all")
    parser.add_argument(
        "--unsandboxed",
        action="store_true",
        help="DEVELOPMENT ONLY: run replay steps without bubblewrap (recorded in each replay)",
    )
    args = parser.parse_args()
    try:
        settings = load_settings()  # the worker's composition root: read once, passed down
    except ReplaybookError as exc:
        print(f"python -m worker: {exc}", file=sys.stderr)
        sys.exit(2)
    if args.unsandboxed:
        settings = unsandboxed(settings)
    configure_logging(settings.log_format)
    set_image_digest(settings.image_digest)
    set_default_max_steps(settings.max_steps)
    start_metrics_endpoints(settings.metrics)

    async def serve() -> None:
        task = asyncio.current_task()
        assert task is not None  # serve() is the task asyncio.run runs
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await run_workers(settings, args.queue)
        except asyncio.CancelledError:
            pass

    asyncio.run(serve())
    # skip interpreter teardown, which the Temporal SDK's runtime threads can abort
    # (temporalio/sdk-python#300); the workers have shut down cleanly by now
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def unsandboxed(settings: Settings) -> Settings:
    """``--unsandboxed``: the development flag, as ``REPLAYBOOK_SANDBOX=off`` sets it."""
    sandbox = settings.sandbox.model_copy(update={"isolation": NO_ISOLATION})
    return settings.model_copy(update={"sandbox": sandbox})


if __name__ == "__main__":
    main()
