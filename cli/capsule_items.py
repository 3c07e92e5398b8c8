"""The pytest items of ``--replaybook-capsules DIR``: one test per incident capsule, replayed
offline with the ``--replaybook-candidate`` (``cli.pytest_plugin``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest


def run_capsule_sync(
    path: Path,
    candidates: Sequence[tuple[str, str]],
    *,
    repeat: int = 5,
    public_key: Path | None = None,
) -> dict[str, Any]:
    """``replaybook case run`` from synchronous code (in a thread if a loop is running):
    the capsule checked, then its case replayed offline; ``CapsuleRefusedError`` naming the
    failed check."""
    from app.capsule_run import run_capsule
    from app.capsules import open_capsule
    from cli.case import trusted_key
    from cli.common import cli_settings
    from worker.catalogs import catalogs

    key, _ = trusted_key(public_key)
    capsule = open_capsule(path.read_bytes(), key)
    settings = cli_settings()
    known = catalogs(None, settings.models, settings.model_registry)

    def run() -> dict[str, Any]:
        return asyncio.run(run_capsule(capsule, candidates, known, repeat=repeat))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def capsule_failure(result: dict[str, Any]) -> str:
    """Why a capsule's test fails: every broken assertion, or why it is inconclusive."""
    head = f"{result['case_id']} ({result['incident_id']}) {result['verdict']} for {result['candidate']}"
    reasons = dict.fromkeys(f"{f['assertion']} — {f['reason']}" for f in result["failures"])
    reasons |= dict.fromkeys(
        f"inconclusive (not a pass): {i['reason']}" for i in result["inconclusive"]
    )
    return "\n".join([head, *(f"  {r}" for r in reasons)])


class CapsuleItem(pytest.Item):
    def __init__(
        self,
        *,
        capsule: Path,
        candidates: list[tuple[str, str]],
        repeat: int,
        public_key: Path | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.capsule = capsule
        self.candidates = candidates
        self.repeat = repeat
        self.public_key = public_key

    def runtest(self) -> None:
        from models.errors import CapsuleRefusedError

        try:
            result = run_capsule_sync(
                self.capsule, self.candidates, repeat=self.repeat, public_key=self.public_key
            )
        except CapsuleRefusedError as exc:
            raise AssertionError(f"capsule {self.capsule} refused: {exc}") from None
        if not result["passed"]:
            raise AssertionError(capsule_failure(result))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, AssertionError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.capsule, None, f"replaybook capsule {self.capsule.name} {dict(self.candidates)}"


def capsule_items(
    session: pytest.Session,
    config: pytest.Config,
    folders: Sequence[str],
    candidates: list[tuple[str, str]],
) -> list[pytest.Item]:
    """One item per ``*.rbcase`` in ``folders`` (sorted); a usage error without a candidate or
    with a folder that holds none."""
    if not candidates:
        raise pytest.UsageError("--replaybook-capsules needs --replaybook-candidate KIND=VALUE")
    key = config.getoption("--replaybook-public-key")
    items: list[pytest.Item] = []
    for folder in folders:
        found = sorted(Path(folder).glob("*.rbcase"))
        if not found:
            raise pytest.UsageError(f"--replaybook-capsules {folder}: no *.rbcase file there")
        items.extend(
            CapsuleItem.from_parent(
                session,
                name=f"capsule[{path.stem}]",
                capsule=path.resolve(),
                candidates=candidates,
                repeat=config.getoption("--replaybook-repeat"),
                public_key=Path(key) if key else None,
            )
            for path in found
        )
    return items
