"""World replays over many runs, and how they compare with the benchmark's expectations.

``WorldData`` is the ``env-data`` folder (``<version>/<domain>/*.json``): it loads each
database once and replays runs against fresh copies. Which version a run was recorded against
is the run's own metadata (``ForensicsRun.env_version``: ``import tau-bench --env-version``,
or the ``env_version`` of the expectations beside a results file); a folder that holds a
single version of the domain needs none. ``measure_world`` replays every run on
the database version it was recorded on (final hash, recorded outputs reproduced, which calls
mutated the database) and on the other version (where the first answer diverges), and checks
each figure against the run's line of ``*.expectations.jsonl`` when there is one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from integrations.tau_bench.forensics import ForensicsRun
from integrations.tau_bench.world.db import DomainData, load_domain
from integrations.tau_bench.world.replay import WorldReplay, replay_run
from models.errors import InvalidInputError

__all__ = [
    "WorldData",
    "env_version_beside",
    "expectations_beside",
    "load_expectations",
    "measure_world",
]

ExpectationKey = tuple[str, str, int]  # (domain, task id, trial)


class WorldData:
    """The domain databases of an ``env-data`` folder, each loaded once."""

    def __init__(self, env_dir: str | Path) -> None:
        self.env_dir = Path(env_dir)
        if not self.env_dir.is_dir():
            raise InvalidInputError(f"--env-data {env_dir}: not a folder")
        self._bases: dict[tuple[str, str], DomainData] = {}
        #: replays already made (evaluate asks for the state check, then measures the same runs)
        self._replays: dict[tuple[str, str, str, bool], WorldReplay] = {}

    def versions(self, domain: str) -> tuple[str, ...]:
        """The database versions of ``domain`` in the folder (``<version>/<domain>/``)."""
        return tuple(sorted(p.name for p in self.env_dir.iterdir() if (p / domain).is_dir()))

    def version_of(self, run: ForensicsRun, version: str | None = None) -> str:
        """The version to replay ``run`` on: the one asked for, else the one the run was
        recorded against, else the folder's only version of the domain."""
        chosen = version or run.env_version
        if chosen is None:
            known = self.versions(run.domain)
            if len(known) != 1:
                raise InvalidInputError(
                    f"run {run.run_id}: its database version was not recorded and "
                    f"{self.env_dir} holds {len(known)} versions of {run.domain}; import it "
                    "with --env-version COMMIT (or pass --db-version)"
                )
            chosen = known[0]
        return chosen

    def other_version(self, run: ForensicsRun) -> str | None:
        """Another version of the run's domain (for the drift check), if the folder has one."""
        recorded = self.version_of(run)
        return next((v for v in self.versions(run.domain) if v != recorded), None)

    def base(self, domain: str, version: str | None = None) -> DomainData:
        """One domain's database at ``version`` (default: the folder's only version of it)."""
        known = self.versions(domain)
        if version is None and len(known) == 1:
            version = known[0]
        if version not in known:
            raise InvalidInputError(
                f"unknown database version {version!r} for {domain}; expected one of {known}"
            )
        key = (domain, version)
        if key not in self._bases:
            self._bases[key] = load_domain(self.env_dir, version, domain)
        return self._bases[key]

    def replay(
        self, run: ForensicsRun, version: str | None = None, with_expected: bool = True
    ) -> WorldReplay:
        base = self.base(run.domain, self.version_of(run, version))
        key = (run.domain, run.run_id, base.version, with_expected)
        if key not in self._replays:
            self._replays[key] = replay_run(run, base, with_expected=with_expected)
        return self._replays[key]

    def state_matches(self, run: ForensicsRun) -> bool | None:
        """The benchmark's state check: the run's final database equals the database after
        its ground-truth actions (for ``compare_expected(world_state_matches=...)``)."""
        return self.replay(run).state_matches_expected


def load_expectations(path: str | Path, domain: str) -> dict[ExpectationKey, dict[str, Any]]:
    """One ``*.expectations.jsonl`` file, keyed by (domain, task id, trial)."""
    out: dict[ExpectationKey, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc.strerror}") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out[(domain, str(row["task_id"]), int(row["trial"]))] = row
        except (ValueError, KeyError, TypeError):
            raise InvalidInputError(f"{path}:{number}: not an expectations line") from None
    return out


def expectations_beside(runs_file: str | Path) -> Path | None:
    """``X.expectations.jsonl`` next to a runs file ``X.json``, when it exists."""
    path = Path(runs_file)
    candidate = path.with_name(f"{path.stem}.expectations.jsonl")
    return candidate if candidate.is_file() else None


def env_version_beside(runs_file: str | Path) -> str | None:
    """The benchmark commit the runs of ``X.json`` were recorded against, from the
    ``env_version`` (``tau-bench@7362a17 (2024-11-22)``) of its expectations, when present."""
    beside = expectations_beside(runs_file)
    if beside is None:
        return None
    for line in beside.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                version = str(json.loads(line).get("env_version") or "")
            except (ValueError, AttributeError):
                return None
            commit = version.partition("@")[2].split(" ")[0]
            return commit or None
    return None


def _ratio(hits: int, total: int) -> float | None:
    return round(hits / total, 4) if total else None


def _check(replay: WorldReplay, drift: WorldReplay | None, row: dict[str, Any]) -> dict[str, Any]:
    mutating = [c.tool_index for c in replay.calls if c.mutated]
    expected_mutating = [c["tool_msg_index"] for c in row.get("tool_calls", []) if c["mutated_db"]]
    expected_drift = (row.get("drift_check") or {}).get("first_divergent_tool_msg_index")
    return {
        "final_hash": replay.final_hash == row.get("final_db_hash_after_replay"),
        "expected_hash": replay.expected_hash == row.get("gt_final_db_hash"),
        "initial_hash": replay.initial_hash == row.get("initial_db_hash"),
        "mutating_calls": mutating == expected_mutating,
        # no other version in the folder: nothing to compare, not a disagreement
        "drift": drift is None or drift.first_divergent_tool_index == expected_drift,
        "expected_drift": expected_drift,
    }


def measure_world(
    runs: Iterable[ForensicsRun],
    data: WorldData,
    expectations: dict[ExpectationKey, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Replay every run on its recorded database and on the other version; with
    expectations, the share of runs whose figures agree with them."""
    expectations = expectations or {}
    totals = {"runs": 0, "compared": 0, "reproduced": 0, "drift_diverging": 0}
    agree = dict.fromkeys(("final_hash", "expected_hash", "initial_hash", "mutating_calls"), 0)
    agree["drift"] = 0  # the first divergent tool message on the other database version
    checked, problems = 0, []
    by_domain: dict[str, dict[str, int]] = {}
    for run in runs:
        replay = data.replay(run)
        drift_version = data.other_version(run)
        drift = data.replay(run, drift_version, with_expected=False) if drift_version else None
        totals["runs"] += 1
        totals["compared"] += replay.n_compared
        totals["reproduced"] += replay.n_reproduced
        totals["drift_diverging"] += (
            drift is not None and drift.first_divergent_tool_index is not None
        )
        d = by_domain.setdefault(run.domain, {"runs": 0, "final_hash_matches": 0})
        d["runs"] += 1
        if replay.n_reproduced != replay.n_compared:
            problems.append(
                {
                    "run_id": run.run_id,
                    "problem": "outputs differ",
                    "first_divergent_tool_message": replay.first_divergent_tool_index,
                }
            )
        row = expectations.get((run.domain, run.task_id, run.trial))
        if row is None:
            continue
        checked += 1
        check = _check(replay, drift, row)
        d["final_hash_matches"] += check["final_hash"]
        for name in agree:
            agree[name] += check[name]
        failed = [name for name in agree if not check[name]]
        if failed:
            problems.append(
                {
                    "run_id": run.run_id,
                    "problem": f"disagrees on {failed}",
                    "drift": drift.first_divergent_tool_index if drift else None,
                    "expected_drift": check["expected_drift"],
                }
            )
    return {
        "runs": totals["runs"],
        "runs_with_expectations": checked,
        "final_hash_matches": _ratio(agree["final_hash"], checked),
        "expected_actions_hash_matches": _ratio(agree["expected_hash"], checked),
        "initial_hash_matches": _ratio(agree["initial_hash"], checked),
        "mutating_calls_agree": _ratio(agree["mutating_calls"], checked),
        "outputs_compared": totals["compared"],
        "outputs_reproduced": totals["reproduced"],
        "output_reproduction": _ratio(totals["reproduced"], totals["compared"]),
        "drift_runs_diverging": totals["drift_diverging"],
        "drift_point_agreement": _ratio(agree["drift"], checked),
        "by_domain": by_domain,
        "problems": problems,
    }
