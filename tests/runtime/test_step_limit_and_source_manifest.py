"""The step limit is a setting an agent passes through ``record_run`` (a run past the default
1,000 steps records), and the source manifest is computed once per process, not per run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from examples.synthetic import record_synthetic_run, synthetic_spec
from runtime import executor, manifests
from runtime.executor import StepLimitExceeded
from runtime.session import record_run
from tests.runtime.conftest import Recording


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_a_run_longer_than_the_default_limit_records(
    rec: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "_default_max_steps", 50)  # stands for the 1,000 default
    result = await record_synthetic_run(rec.ledger, rec.artifacts, 200)
    assert result.steps == 200
    assert (await rec.ledger.verify(result.run_id, full=False)).intact


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_the_agents_limit_and_the_process_default_apply(
    rec: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = dataclasses.replace(synthetic_spec(10), max_steps=3)
    with pytest.raises(StepLimitExceeded, match="exceeded 3 steps"):
        await record_run(spec, rec.ledger, rec.artifacts, run_id="limit-a", agent_input={}, seed=1)
    monkeypatch.setattr(executor, "_default_max_steps", executor.DEFAULT_MAX_STEPS)
    executor.set_default_max_steps(4)
    spec = dataclasses.replace(synthetic_spec(10), max_steps=None)
    with pytest.raises(StepLimitExceeded, match="exceeded 4 steps"):
        await record_run(spec, rec.ledger, rec.artifacts, run_id="limit-b", agent_input={}, seed=1)
    with pytest.raises(ValueError):
        executor.set_default_max_steps(0)


def test_the_source_manifest_runs_git_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    real = manifests._git

    def counting(root: Path, *args: str) -> str | None:
        calls.append(args)
        return real(root, *args)

    monkeypatch.setattr(manifests, "_git", counting)
    manifests._source_code.cache_clear()
    root = Path(__file__).resolve().parents[2]
    first = manifests.capture_source_code(root)
    made = len(calls)
    assert made >= 1
    assert manifests.capture_source_code(root) == first
    assert manifests.capture_source_code(root / "tests" / "..") == first
    assert len(calls) == made
