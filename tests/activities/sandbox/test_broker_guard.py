"""The broker's decisions, called directly as a hostile child would (no sandbox needed): the
budget is the worker's count, quotas hold, a refusal poisons the batch, evidence is sanitized."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from activities.sandbox import codec
from activities.sandbox.broker import StepBroker
from activities.sandbox.config import SandboxSettings
from activities.sandbox.guard import Quotas
from examples.coding_agent import coding_catalog, record_coding_run
from examples.synthetic import PROFILE
from models import ExecutionEventType, ReplayMode
from models.budget import BudgetUsage
from models.errors import SandboxQuotaError, SandboxViolationError
from models.model_call import ModelRequest, ModelResponse, TokenUsage
from models.redaction import REDACT_V1, redaction_policy
from models.replay import ReplayBudget
from models.replay_flow import ReplayCursorsView, ReplayPlan, StepInput
from runtime.env_values import read_section
from runtime.ports import NewEvent
from runtime.replay.engine import ReplayEngine
from stores.bundle import open_stores
from tests.fixtures_replay import stack_settings

QUOTAS = Quotas(write_bytes=4096, calls_per_batch=50, message_bytes=1 << 20)
REQUEST = ModelRequest.model_validate(
    {"model": "none", "messages": [{"role": "user", "content": "hi"}]}
)


class CountingModel:
    # stands in for the model the coding runs recorded (an EXACT replay calls that one)
    profile = PROFILE

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return ModelResponse(model="none", content="ok", usage=TokenUsage(prompt_tokens=10))


def test_the_quotas_are_settings() -> None:
    defaults = read_section(SandboxSettings, {})
    assert defaults.max_write_bytes == 64 * 1024**2
    set_ = read_section(SandboxSettings, {"REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES": "1024"})
    assert set_.max_write_bytes == 1024


@pytest.fixture
async def stores(tmp_path: Path):
    async with open_stores(stack_settings(tmp_path, "unused").stores) as opened:
        yield opened


async def _broker(stores, model, plan_changes, usage=BudgetUsage(), quotas=QUOTAS):
    source = await record_coding_run(stores.ledger, stores.artifacts, "print('hi')")
    catalog = dataclasses.replace(coding_catalog(), models={"none": model})
    engine = ReplayEngine(
        stores.ledger, stores.evidence, stores.artifacts, {"coding-agent": catalog}
    )
    plan = ReplayPlan(
        replay_id=f"replay-guard-{uuid.uuid4().hex[:8]}",
        source_run_id=source.run_id,
        **plan_changes,
    )
    step = StepInput(
        plan=plan,
        step_id="run_generated_code",
        state_ref=None,
        cursors=ReplayCursorsView(),
        head=1,
        usage=usage,
    )
    return await StepBroker.open(engine, step, quotas), engine, plan


def _complete(model: str = "none") -> dict:
    return {"graph_id": "coding-agent", "model": model, "request": REQUEST.model_dump(mode="json")}


async def test_model_calls_past_the_budget_are_refused_by_the_workers_count(stores) -> None:
    model = CountingModel()
    broker, _, _ = await _broker(
        stores,
        model,
        {"mode": ReplayMode.EXACT, "budget": ReplayBudget(max_model_calls=3)},
        usage=BudgetUsage(model_calls=1),  # one call in an earlier batch
    )
    await broker.handle("model.complete", _complete())
    await broker.handle("model.complete", _complete())
    with pytest.raises(SandboxViolationError, match="max_model_calls 3"):
        await broker.handle("model.complete", _complete())
    assert model.calls == 2
    assert broker.usage() == BudgetUsage(model_calls=2, tokens=20)
    # the batch is poisoned: even a read is refused now
    with pytest.raises(SandboxViolationError, match="earlier call"):
        await broker.handle("ledger.get_run", {"run_id": broker.replay_id})
    assert broker.kinds == ["model.complete"]


async def test_only_the_plans_model_in_a_mode_that_calls_one(stores) -> None:
    model = CountingModel()
    broker, _, _ = await _broker(stores, model, {"mode": ReplayMode.RECORDED})
    with pytest.raises(SandboxViolationError, match="RECORDED"):
        await broker.handle("model.complete", _complete())
    broker, _, _ = await _broker(stores, model, {"mode": ReplayMode.EXACT})
    with pytest.raises(SandboxViolationError, match="the plan names 'none'"):
        await broker.handle("model.complete", _complete("gpt-other"))
    assert model.calls == 0


async def test_appends_need_their_sequence_and_writes_stop_at_the_quota(stores) -> None:
    broker, _, plan = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    event = codec.dump_new_event(
        NewEvent("s", ExecutionEventType.STEP_STARTED, _now(), payload={"step": "s"})
    )
    with pytest.raises(SandboxViolationError, match="expected_sequence"):
        await broker.handle("ledger.append_many", {"run_id": plan.replay_id, "events": [event]})

    broker, _, _ = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    await broker.handle("artifacts.put", {"data": codec.b64(b"x" * 3000)})
    with pytest.raises(SandboxQuotaError, match="REPLAYBOOK_SANDBOX_MAX_WRITE_BYTES"):
        await broker.handle("artifacts.put", {"data": codec.b64(b"y" * 3000)})
    assert broker.over_quota is not None and broker.written == 3000
    with pytest.raises(SandboxQuotaError):
        await broker.handle("artifacts.exists", {"digest": "sha256:00"})

    calls = Quotas(write_bytes=1 << 20, calls_per_batch=2, message_bytes=1 << 20)
    broker, _, plan = await _broker(
        stores, CountingModel(), {"mode": ReplayMode.RECORDED}, quotas=calls
    )
    for _ in range(2):
        await broker.handle("ledger.get_run", {"run_id": plan.source_run_id})
    with pytest.raises(SandboxQuotaError, match="calls in one batch"):
        await broker.handle("ledger.get_run", {"run_id": plan.source_run_id})


async def test_evidence_a_replay_writes_is_sanitized_with_the_source_policy(stores) -> None:
    broker, _, _ = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    # the coding run recorded raw (policy none): a source with a policy gets its replay sanitized
    broker.guard.redaction = redaction_policy(REDACT_V1, frozenset())
    raw = NewEvent(
        "s", ExecutionEventType.STEP_COMPLETED, _now(), payload={"who": "ada@example.com"}
    )
    stored = broker.guard.sanitized_event(raw)
    assert "ada@example.com" not in json.dumps(stored.payload)
    assert stored.redaction_policy_version == REDACT_V1 and stored.raw is not None
    data = broker.guard.sanitized_artifact(b'{"email": "ada@example.com"}')
    assert b"ada@example.com" not in data


def _now():
    from datetime import UTC, datetime

    return datetime(2025, 1, 1, tzinfo=UTC)


async def test_a_replay_adds_only_people_to_its_own_run_subjects(stores) -> None:
    """``vault.add_subjects``: the people a live read returned become subjects of the replay's
    own run; another run, or a subject that is not a PERSON, is refused."""
    person = {"subject_id": "customer:C-2001", "kind": "PERSON", "source": "provider:crm"}
    broker, engine, plan = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    await engine.prepare(plan)  # the replay's run exists
    await broker.handle("vault.add_subjects", {"run_id": plan.replay_id, "subjects": [person]})
    subjects = await stores.ledger.vault.subjects(plan.replay_id)
    assert [(s["subject_id"], s["kind"], s["primary"]) for s in subjects] == [
        ("customer:C-2001", "PERSON", False)
    ]
    with pytest.raises(SandboxViolationError, match="only the replay's own run"):
        await broker.handle(
            "vault.add_subjects", {"run_id": plan.source_run_id, "subjects": [person]}
        )

    broker, _, plan = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    user = {**person, "kind": "END_USER"}
    with pytest.raises(SandboxViolationError, match="not a PERSON"):
        await broker.handle("vault.add_subjects", {"run_id": plan.replay_id, "subjects": [user]})


SECRET = "the other run's compiled prompt: not for a replay of another run"


async def another_runs_prompt(ledger, artifacts):
    """A compiled prompt recorded by another run: its record's key and its text's digest."""
    from models import PromptArtifact, RunRecord
    from models.canonical import canonical_hash

    digest = await artifacts.put(SECRET.encode())
    run_id = f"other-{uuid.uuid4().hex[:10]}"
    await ledger.create_run(
        RunRecord(run_id=run_id, graph_id="g", graph_version="1", created_at=_now())
    )
    prompt = PromptArtifact(
        artifact_id=f"pa-{uuid.uuid4().hex[:10]}",
        template_version="t1",
        compiled_hash=canonical_hash(SECRET),
        content_ref=digest,
        token_count=1,
        compiled_at=_now(),
    )
    await ledger.append(
        run_id, NewEvent("s", ExecutionEventType.PROMPT_COMPILED, _now(), record=prompt)
    )
    return prompt.artifact_id, digest


async def test_evidence_of_another_run_is_refused_by_key_and_by_digest(stores) -> None:
    """Issue 31 item 7: content addressing is no permission. Another run's prompt record (by
    key), its text (by digest, read or asked whether it exists) and a forged event whose
    payload reference names it are refused; the source's and the batch's own are served."""
    key, digest = await another_runs_prompt(stores.ledger, stores.artifacts)
    calls = {
        "evidence.record": {"type": "PromptArtifact", "key": key},
        "artifacts.get": {"digest": digest},
        "artifacts.exists": {"digest": digest},
    }
    for method, params in calls.items():
        broker, _, _ = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
        with pytest.raises(
            SandboxViolationError, match=f"{method} of .*(another run|not evidence)"
        ):
            await broker.handle(method, params)
        assert broker.kinds == ["scope"], broker.kinds

    broker, _, plan = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    (first, *_) = await stores.ledger.events(plan.source_run_id)
    forged = first.model_copy(update={"payload_ref": f"cas:{digest}"}).model_dump(mode="json")
    with pytest.raises(SandboxViolationError, match=r"ledger\.payload of artifact"):
        await broker.handle("ledger.payload", {"event": forged})

    # what the replay may read is still served: the source's evidence, the batch's own puts
    broker, _, plan = await _broker(stores, CountingModel(), {"mode": ReplayMode.RECORDED})
    from runtime.evidence_refs import collect_references

    (source_ref, *_) = sorted(
        await collect_references(stores.ledger, stores.evidence, plan.source_run_id)
    )
    assert await broker.handle("artifacts.exists", {"digest": source_ref}) is True
    assert codec.unb64(await broker.handle("artifacts.get", {"digest": source_ref}))
    own = await broker.handle("artifacts.put", {"data": codec.b64(b"a checkpointed state")})
    assert (
        codec.unb64(await broker.handle("artifacts.get", {"digest": own}))
        == b"a checkpointed state"
    )
    assert broker.violation is None
