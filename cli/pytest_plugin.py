"""A pytest plugin so a project can gate releases in its own test suite:

    def test_candidate_repeats_no_incident(replaybook_gate):
        replaybook_gate(prompt="v18")          # fails the test naming every failed assertion

or ``pytest --replaybook-candidate prompt=v18`` to run the gate as its own test item. It
uses the same cases and replays as ``replaybook regress`` (the same settings: the
environment, and a ``replaybook dev up`` stack's addresses below it).

``pytest --replaybook-capsules tests/cases/ --replaybook-candidate prompt=v18`` runs every
incident capsule (``*.rbcase``) in the folder as a test instead, offline (``replaybook case
run``: no Temporal, database or artifact store); a capsule that fails a check, a case that
breaks and an inconclusive case each fail their test.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest


def run_gate_sync(candidates: list[tuple[str, str]], repeat: int = 5) -> dict[str, Any]:
    """``app.regression.run_gate`` from synchronous code (in a thread if a loop is running)."""
    from app.regression import run_gate
    from cli.common import cli_settings
    from stores.bundle import open_stores
    from worker.temporal import connect

    async def gate() -> dict[str, Any]:
        settings = cli_settings()
        async with open_stores(settings.stores) as stores:
            return await run_gate(await connect(settings), stores, candidates, repeat=repeat)

    def run() -> dict[str, Any]:
        return asyncio.run(gate())

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(run).result()


def failure_report(result: dict[str, Any]) -> str:
    lines = [f"regression gate FAILED for candidate {result['candidate']}:"]
    for case in result["cases"]:
        if case["passed"]:
            continue
        where = f"  {case['case_id']} ({case['incident_id']})"
        if case["failures"]:
            first = case["failures"][0]
            lines.append(f"{where}: {first['assertion']} — {first['reason']}")
        else:  # no regression shown, and no pass either
            lines.append(f"{where}: INCONCLUSIVE (not a pass) — {_undecided(case)}")
    return "\n".join(lines)


def _undecided(case: dict[str, Any]) -> str:
    """Why a case neither passed nor failed: too few conclusive replays to decide (the usual
    reason: clean replays whose interval still reaches above the threshold), and the first
    replay that stopped before its end, if one did."""
    low, high = case.get("ci95") or (0.0, 1.0)
    why = (
        f"reproduced {case.get('reproduced', 0)}/{case.get('conclusive', 0)} conclusive "
        f"(95% Wilson {low:.2f}-{high:.2f}; threshold {case.get('threshold')})"
    )
    if case.get("repeats_to_decide"):
        why += f"; about {case['repeats_to_decide']} conclusive repeats would decide"
    if case.get("inconclusive"):
        why += f"; replay {case['inconclusive'][0].get('replay_id')} stopped: "
        why += str(case["inconclusive"][0].get("reason"))
    return why


@pytest.fixture
def replaybook_gate() -> Callable[..., dict[str, Any]]:
    def gate(repeat: int = 5, **candidate: str) -> dict[str, Any]:
        result = run_gate_sync(list(candidate.items()), repeat=repeat)
        if not result["passed"]:
            pytest.fail(failure_report(result), pytrace=False)
        return result

    return gate


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("replaybook")
    group.addoption(
        "--replaybook-candidate",
        action="append",
        default=[],
        metavar="KIND=VALUE",
        help="run Replaybook's regression gate for this candidate (prompt=V, model=M, …)",
    )
    group.addoption(
        "--replaybook-capsules",
        action="append",
        default=[],
        metavar="DIR",
        help="run every incident capsule (*.rbcase) in DIR as a test, offline, with the "
        "--replaybook-candidate",
    )
    group.addoption(
        "--replaybook-repeat", type=int, default=5, help="replays of each capsule's case"
    )
    group.addoption(
        "--replaybook-public-key",
        default=None,
        metavar="FILE",
        help="the PEM public key capsules must be signed with (default: as `case run`)",
    )


class _GateItem(pytest.Item):
    def __init__(self, *, candidates: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.candidates = candidates

    def runtest(self) -> None:
        result = run_gate_sync(self.candidates)
        if not result["passed"]:
            raise AssertionError(failure_report(result))

    def reportinfo(self) -> tuple[Path, None, str]:
        return self.path, None, f"replaybook regression gate {dict(self.candidates)}"


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    values = config.getoption("--replaybook-candidate")
    candidates = [tuple(v.split("=", 1)) for v in values if "=" in v]
    folders = config.getoption("--replaybook-capsules")
    if folders:
        items.extend(capsule_items(session, config, folders, candidates))
        return
    if not values:
        return
    items.append(
        _GateItem.from_parent(session, name="replaybook-regression-gate", candidates=candidates)
    )


# --replaybook-capsules: one test per incident capsule, replayed offline -------------------


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
    from app.capsule_keys import trusted_capsule_key
    from app.capsule_run import run_capsule
    from app.capsules import open_capsule
    from cli.common import capsule_key_settings, cli_settings
    from worker.catalogs import catalogs

    settings = cli_settings()
    key, _ = trusted_capsule_key(public_key, capsule_key_settings(settings.home))
    capsule = open_capsule(path.read_bytes(), key)
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
