"""Where forensics reads tau-bench runs from: benchmark result files (JSON lists of runs).

Runs recorded by the importer are read through its loader (``integrations.tau_bench.imported``);
this module reads the same format straight from files, which is how the evaluation is run
before anything is imported and how the tests drive the comparison from the real data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from integrations.tau_bench.evaluate import Annotation, annotations_from_agentrx
from integrations.tau_bench.forensics import ForensicsRun
from integrations.tau_bench.trajectory import run_from_tau_record, tool_schemas
from models.errors import InvalidInputError

__all__ = ["dedupe_runs", "load_annotations", "load_json", "runs_from_file"]

DOMAINS = ("airline", "retail")


def load_json(path: str | Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise InvalidInputError(f"{path} is not JSON: {exc}") from None


def runs_from_file(
    path: str | Path, domain: str, tools_info: dict[str, Any], env_version: str | None = None
) -> list[ForensicsRun]:
    """Every run of a tau-bench results file (a JSON list of {task_id, trial, reward, info,
    traj}); ``env_version``: the benchmark commit whose databases they were recorded against
    (default: the ``env_version`` of the expectations beside the file, when there are some)."""
    from integrations.tau_bench.world.measure import env_version_beside

    env_version = env_version or env_version_beside(path)
    if domain not in DOMAINS:
        raise InvalidInputError(f"unknown tau-bench domain {domain!r}; expected one of {DOMAINS}")
    document = load_json(path)
    if not isinstance(document, list):
        raise InvalidInputError(
            f"{path}: expected a JSON list of runs, got {type(document).__name__}"
        )
    writes, schemas = tool_schemas(tools_info, domain)
    runs = []
    for position, record in enumerate(document):
        try:
            runs.append(
                run_from_tau_record(record, domain, writes, schemas, env_version=env_version)
            )
        except InvalidInputError as exc:
            raise InvalidInputError(f"{path}: run #{position}: {exc}") from None
    return runs


def dedupe_runs(runs: list[ForensicsRun]) -> tuple[list[ForensicsRun], int]:
    """One run per (domain, task, trial): the same run can be shipped in two files."""
    seen: set[tuple[str, str, int]] = set()
    kept = []
    for run in runs:
        key = (run.domain, run.task_id, run.trial)
        if key not in seen:
            seen.add(key)
            kept.append(run)
    return kept, len(runs) - len(kept)


def load_annotations(path: str | Path | None) -> dict[str, Annotation]:
    if path is None:
        return {}
    document = load_json(path)
    if not isinstance(document, list):
        raise InvalidInputError(f"{path}: expected a JSON list of annotations")
    return annotations_from_agentrx(document)
