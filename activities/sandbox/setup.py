"""How a replay worker runs its steps: sandboxed, or — only with the development flag — not."""

from __future__ import annotations

import structlog

from activities.sandbox.bwrap import check_available
from activities.sandbox.config import NO_ISOLATION, SandboxSettings
from activities.sandbox.runner import SandboxedSteps
from runtime.replay.engine import ReplayEngine

log = structlog.get_logger(__name__)


def sandboxed_steps(
    engine: ReplayEngine, settings: SandboxSettings, *, catalog_factory: str
) -> SandboxedSteps | None:
    """The sandboxed step runner, after proving a sandbox can be created: otherwise
    ``SandboxUnavailableError`` and the replay worker does not start (never silently
    unsandboxed). With the development flag: None, and the engine records ``none (dev flag)``
    as the isolation of every step it runs. ``catalog_factory`` (``module:function``) builds
    the agent catalogs inside the sandboxed child."""
    if not settings.enabled:
        log.warning("replay steps run UNSANDBOXED: development flag", isolation=NO_ISOLATION)
        engine.isolation = NO_ISOLATION
        return None
    check_available(settings)
    log.info(
        "replay steps run in bubblewrap",
        cpu_seconds=settings.cpu_seconds,
        address_space_bytes=settings.address_space_bytes,
        max_processes=settings.max_processes,
    )
    return SandboxedSteps(engine, settings, catalog_factory=catalog_factory)
