"""Forensics against ground truth for imported benchmark runs (tau-bench): where runs come
from (the store or result files), expected-outcome comparison, evaluation, world replay."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from integrations.tau_bench.forensics import ExpectedComparison, ForensicsRun
from models.errors import InvalidInputError

if TYPE_CHECKING:
    from stores.bundle import Stores


def runs_from_files(files: list[str], tools_info_path: str | None) -> list[ForensicsRun]:
    """Runs read from tau-bench result files given as ``DOMAIN=PATH`` or
    ``DOMAIN@VERSION=PATH`` (VERSION: the benchmark commit whose databases they were recorded
    against; default: the expectations beside the file say it)."""
    from integrations.tau_bench.sources import load_json, runs_from_file

    if not tools_info_path:
        raise InvalidInputError("--file needs --tools-info PATH (the tools' schemas)")
    tools_info = load_json(tools_info_path)
    runs: list[ForensicsRun] = []
    for spec in files:
        domain, sep, path = spec.partition("=")
        if not sep or not path:
            raise InvalidInputError(f"--file {spec!r}: expected DOMAIN=PATH")
        domain, _, version = domain.partition("@")
        runs += runs_from_file(path, domain, tools_info, version or None)
    return runs


async def imported_runs(stores: Stores, run_id: str | None = None) -> list[ForensicsRun]:
    """The tau-bench runs imported into the store (one, when ``run_id`` is given)."""
    from integrations.tau_bench.imported import load_imported_runs

    return await load_imported_runs(stores, run_id)


def world_data(env_data: str | None) -> Any:
    """The benchmark's databases for the world replay, when ``--env-data`` names them."""
    from integrations.tau_bench.world.measure import WorldData

    return WorldData(env_data) if env_data else None


def expectations(files: list[str] | None) -> dict[Any, Any]:
    """The ``*.expectations.jsonl`` files beside the given result files."""
    from integrations.tau_bench.world.measure import expectations_beside, load_expectations

    out: dict[Any, Any] = {}
    for spec in files or []:
        domain, _, path = spec.partition("=")
        domain = domain.partition("@")[0]
        beside = expectations_beside(path)
        if beside is not None:
            out.update(load_expectations(beside, domain))
    return out


async def load_runs(
    stores_opener: Callable[[], AbstractAsyncContextManager[Stores]],
    files: list[str] | None,
    tools_info: str | None,
    run_id: str | None = None,
) -> list[ForensicsRun]:
    """Runs from result files when given, else from the store (opened only then)."""
    if files:
        runs = runs_from_files(files, tools_info)
        return [r for r in runs if run_id is None or r.run_id == run_id]
    async with stores_opener() as stores:
        return await imported_runs(stores, run_id)


def expected_comparison(run: ForensicsRun, env_data: str | None) -> ExpectedComparison:
    """One run's writes against its expected actions, with the world replay's state check
    when the benchmark's databases are given."""
    from integrations.tau_bench.forensics import compare_expected

    world = world_data(env_data)
    state = world.state_matches(run) if world is not None else None
    return compare_expected(run, world_state_matches=state)


def evaluate(
    runs: list[ForensicsRun],
    *,
    annotations: str | None,
    env_data: str | None,
    files: list[str] | None,
) -> dict[str, Any]:
    """Agreement of predicted outcomes with recorded rewards, signatures, localisation and,
    with the benchmark's databases, the world replay's measures."""
    from integrations.tau_bench.evaluate import evaluate_runs
    from integrations.tau_bench.sources import dedupe_runs, load_annotations

    runs, duplicates = dedupe_runs(runs)
    world = world_data(env_data)
    summary = evaluate_runs(
        runs, load_annotations(annotations), world=world.state_matches if world else None
    )
    summary["duplicates_skipped"] = duplicates
    if world is not None:
        from integrations.tau_bench.world.measure import measure_world

        summary["world"] = measure_world(runs, world, expectations(files))
    return summary


def measure_world_replay(
    runs: list[ForensicsRun], env_data: str, files: list[str] | None
) -> dict[str, Any] | None:
    """Every run's world replay measured; ``None`` when there is no run."""
    from integrations.tau_bench.sources import dedupe_runs
    from integrations.tau_bench.world.measure import measure_world

    runs, _ = dedupe_runs(runs)
    if not runs:
        return None
    return measure_world(runs, world_data(env_data), expectations(files))
