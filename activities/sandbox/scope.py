"""Which evidence one replay's sandboxed batch may read through its broker (issue 31 item 7).

Only the replay's source run and the replay's own run: their events and records, and the
artifacts their evidence points to (``runtime.evidence_refs.collect_references``; for the
source also every digest its header and its recorded input name), plus the
artifacts its plan and step input name (a candidate prompt, the state the step starts from)
and those the batch itself stored. Content addressing alone is no permission: a digest read
from another run's record (or guessed) names that run's prompt text as well as it names ours,
so a lookup by key or by digest is answered only after this check, and refused otherwise.

A record looked up by key is the source's or the replay's when it says so (``run_id``) or,
for records that carry no run id (a compiled prompt), when it is among that run's records.
The source run is immutable: its set of digests is computed once per worker and kept.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from activities.sandbox.guard import Refused
from models import ExecutionEvent, ExecutionEventType
from models.digest import is_digest
from models.replay_flow import StepInput
from runtime.evidence_refs import CAS_PREFIX, collect_references, refs_in
from runtime.ports import NewEvent
from runtime.replay.engine import ReplayEngine
from runtime.replay.source import SourceEvidence

#: source runs whose digests are kept (a worker serves a few replays at a time)
KEPT_SOURCES = 8
_SOURCE_DIGESTS: OrderedDict[tuple[int, str], frozenset[str]] = OrderedDict()


def named_digests(value: Any) -> set[str]:
    """Every ``sha256:`` digest anywhere in a JSON value (the plan and step as passed)."""
    found: set[str] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif is_digest(item):
            found.add(item)
    return found


def _step_refs(event_type: ExecutionEventType, payload: Any) -> set[str]:
    """The digests a completed step's ``replay_step`` names (its checkpoint, random state)."""
    if event_type is not ExecutionEventType.STEP_COMPLETED or not isinstance(payload, dict):
        return set()
    return named_digests(payload.get("replay_step"))


def _named_by_source(source: SourceEvidence) -> set[str]:
    """What the source's evidence the worker holds decoded names: its header and recorded
    input (an imported tool loop's tool catalogue and system prompt), its compiled prompts'
    texts, its retrieved chunks, its checkpointed states and random states. Read without
    touching the stores: the whole evidence (``collect_references``) is read only for a
    digest not among these."""
    found = named_digests(source.run.model_dump(mode="json")) | named_digests(source.agent_input)
    found.update(p.content_ref for p in source.model_prompts if p is not None)
    for retrievals in source.retrievals.values():
        found.update(item.chunk_hash for r in retrievals for item in r.evidence)
    found.update(c.state_ref for c in source.checkpoints_in_order)
    found.update(c.state_ref for c in source.checkpoints.values())
    # a fork restores the random state its step started with
    found.update(m.random_state_ref for m in source.starts.values() if m.random_state_ref)
    return found


class EvidenceScope:
    """The reads one batch may make; ``Refused`` (kind ``scope``) for anything else."""

    def __init__(self, engine: ReplayEngine, step: StepInput) -> None:
        self.engine = engine
        self.source_run_id = step.plan.source_run_id
        self.replay_id = step.plan.replay_id
        self.runs = (self.source_run_id, self.replay_id)
        #: named by the workflow (plan and step input): trusted
        self._named = named_digests(step.model_dump(mode="json"))
        #: stored by this batch (a step reads back what it checkpointed)
        self.stored: set[str] = set()
        #: the replay run's digests: read whole on the first miss, then grown with each append
        self._own: set[str] | None = None
        self._source_records: dict[type[Any], list[Any]] = {}
        self._by_source: set[str] | None = None

    def grew(self, events: Iterable[NewEvent], appended: Iterable[ExecutionEvent]) -> None:
        """The replay's run was appended to: what the new events point to is its evidence too
        (added here, so that the run is read at most once a batch)."""
        if self._own is None:  # not read yet: the first miss reads it whole
            return
        for event in events:
            payload = event.payload_json()
            found = refs_in(event.type, payload)
            self._own.update(str(ref) for ref in found if is_digest(ref))
            self._own.update(_step_refs(event.type, payload))
        for stored in appended:
            if stored.payload_ref.startswith(CAS_PREFIX):
                self._own.add(stored.payload_ref[len(CAS_PREFIX) :])

    async def artifact(self, method: str, digest: Any) -> str:
        digest = str(digest)
        if digest in self._named or digest in self.stored:
            return digest
        if self._by_source is None:
            self._by_source = _named_by_source(await self.engine.source(self.source_run_id))
        if digest in self._by_source:  # its tool catalogue, its system prompt…
            return digest
        if digest in await self._source_digests():
            return digest
        if self._own is None:
            self._own = await self._own_digests()
        if digest in self._own:
            return digest
        raise Refused(
            "scope",
            f"{method} of artifact {digest[:80]!r}: not evidence of the source run "
            f"{self.source_run_id!r} or of the replay {self.replay_id!r}",
        )

    async def _own_digests(self) -> set[str]:
        """The replay run's evidence as stored: its references, and the checkpoint and random
        state each completed step names inside ``replay_step`` (a batch retried after its
        worker died resumes from them, not from what the workflow passed)."""
        own = await collect_references(self.engine.ledger, self.engine.evidence, self.replay_id)
        for event, data in await self.engine.ledger.events_with_payloads(
            self.replay_id, types=frozenset({ExecutionEventType.STEP_COMPLETED}), missing_ok=True
        ):
            if data:
                own.update(_step_refs(event.type, json.loads(data)))
        return own

    async def record(self, method: str, record_type: type[Any], key: str, record: Any) -> None:
        run_id = getattr(record, "run_id", None)
        if run_id is not None:
            if run_id in self.runs:
                return
            owner = f"of run {run_id!r}"
        else:
            if record in await self._records(record_type, self.source_run_id):
                return
            if record in await self.engine.evidence.records(record_type, self.replay_id):
                return
            owner = "of another run"
        raise Refused(
            "scope",
            f"{method} of {record_type.__name__} {key[:80]!r} {owner} (only the source run "
            f"{self.source_run_id!r} and the replay {self.replay_id!r})",
        )

    async def _records(self, record_type: type[Any], run_id: str) -> list[Any]:
        if record_type not in self._source_records:
            self._source_records[record_type] = await self.engine.evidence.records(
                record_type, run_id
            )
        return self._source_records[record_type]

    async def _source_digests(self) -> frozenset[str]:
        # a long source's whole evidence takes seconds to read and decode, on the worker's
        # event loop: reached only for a digest the decoded source does not name
        key = (id(self.engine.ledger), self.source_run_id)
        found = _SOURCE_DIGESTS.get(key)
        if found is None:
            # what its events and records point to (read once per worker and source run)
            found = frozenset(
                await collect_references(
                    self.engine.ledger, self.engine.evidence, self.source_run_id
                )
            )
            _SOURCE_DIGESTS[key] = found
            while len(_SOURCE_DIGESTS) > KEPT_SOURCES:
                _SOURCE_DIGESTS.popitem(last=False)
        _SOURCE_DIGESTS.move_to_end(key)
        return found
