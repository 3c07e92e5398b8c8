"""The SQL schema as SQLAlchemy Core tables; Alembic migrations in ``stores/migrations`` build it.

``execution_events`` has one column per ``ExecutionEvent`` field (the chain is verified from
these columns). The other evidence tables keep the whole record as JSON in ``record`` plus the
columns they are looked up by.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

Json = JSON().with_variant(JSONB(), "postgresql")
Id = String(512)
DigestCol = String(71)


def _utc() -> DateTime:
    return DateTime(timezone=True)


runs = Table(
    "runs",
    metadata,
    Column("run_id", Id, primary_key=True),
    Column("graph_id", Id, nullable=False),
    Column("graph_version", Id, nullable=False),
    Column("status", String(32), nullable=False),
    Column("created_at", _utc(), nullable=False),
    # the chain head as of the last append: detects a deleted or added tail
    Column("head_sequence", BigInteger, nullable=False),
    Column("head_hash", DigestCol, nullable=False),
    Column("record", Json, nullable=False),
)
# newest first, as the runs are listed (the console's keyset pages, GET /api/runs): a page
# reads its rows, not every run (migration 0008)
Index("ix_runs_created", runs.c.created_at.desc(), runs.c.run_id)

execution_events = Table(
    "execution_events",
    metadata,
    Column("run_id", Id, ForeignKey("runs.run_id"), primary_key=True),
    Column("sequence", BigInteger, primary_key=True, autoincrement=False),
    Column("event_id", Id, nullable=False, unique=True),
    Column("step_id", Id, nullable=False),
    Column("type", String(64), nullable=False),
    Column("payload_ref", String(1024), nullable=False),
    Column("payload_hash", DigestCol, nullable=False),
    Column("previous_hash", DigestCol, nullable=False),
    Column("hash", DigestCol, nullable=False),
    Column("logical_time", _utc(), nullable=False),
    Column("recorded_at", _utc(), nullable=False),
    Column("schema_version", Integer, nullable=False),
    # canonical JSON bytes of a small payload; larger ones live in the artifact store
    Column("payload", LargeBinary, nullable=True),
)


def _evidence_table(name: str, key: str, *extra: Column, unique: tuple[str, ...] = ()) -> Table:
    """A table of hashed evidence records: key, run, step, content hash and the record."""
    table = Table(
        name,
        metadata,
        Column(key, Id, primary_key=True),
        Column("run_id", Id, ForeignKey("runs.run_id"), nullable=False, index=True),
        Column("step_id", Id, nullable=True),
        Column("content_hash", DigestCol, nullable=False),
        # the sequence of the event that carried the record (the latest one for side effects)
        Column("sequence", BigInteger, nullable=False),
        *extra,
        Column("record", Json, nullable=False),
    )
    for column in unique:
        table.append_constraint(UniqueConstraint(column))
    return table


tool_fixtures = _evidence_table(
    "tool_fixtures",
    "fixture_id",
    Column("tool_call_id", Id, nullable=False),
    Column("capability_id", Id, nullable=False),
    Column("request_hash", DigestCol, nullable=False),
    Column("outcome", String(32), nullable=False),
)
Index("ix_tool_fixtures_lookup", tool_fixtures.c.run_id, tool_fixtures.c.request_hash)

prompt_artifacts = _evidence_table(
    "prompt_artifacts",
    "artifact_id",
    Column("template_version", Id, nullable=False),
    Column("compiled_hash", DigestCol, nullable=False),
)

context_snapshots = _evidence_table("context_snapshots", "snapshot_id")

retrieval_fixtures = _evidence_table(
    "retrieval_fixtures",
    "retrieval_id",
    Column("query_hash", DigestCol, nullable=False),
    Column("retriever_version", Id, nullable=False),
)

policy_decisions = _evidence_table(
    "policy_decisions",
    "decision_id",
    Column("policy_id", Id, nullable=False),
    Column("policy_version", Id, nullable=False),
    Column("decision", String(32), nullable=False),
)

approvals = _evidence_table(
    "approvals",
    "approval_id",
    Column("action_hash", DigestCol, nullable=False),
)

side_effects = _evidence_table(
    "side_effects",
    "side_effect_id",
    Column("capability_id", Id, nullable=False),
    Column("idempotency_key", Id, nullable=False),
    Column("status", String(32), nullable=False),
    Column("updated_at", _utc(), nullable=False),
    unique=("idempotency_key",),
)

checkpoints = _evidence_table("checkpoints", "checkpoint_id")

artifacts = Table(
    "artifacts",
    metadata,
    Column("artifact_id", Id, primary_key=True),
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("run_id", Id, ForeignKey("runs.run_id"), nullable=True, index=True),
    Column("content_hash", DigestCol, nullable=False),
    Column("media_type", String(255), nullable=False),
    Column("size", BigInteger, nullable=True),
    Column("created_at", _utc(), nullable=False),
    Column("deleted", Boolean, nullable=False, default=False),
)

# incidents (migration 0002) -------------------------------------------------------------------

incidents = Table(
    "incidents",
    metadata,
    Column("incident_id", Id, primary_key=True),
    Column("source_run_id", Id, ForeignKey("runs.run_id"), nullable=False, index=True),
    # None until the incident is signed
    Column("failure_type", String(32), nullable=True),
    Column("signature", Id, nullable=True, index=True),
    Column("signature_key", Id, nullable=True),
    Column("phase", String(64), nullable=False),
    Column("created_at", _utc(), nullable=False),
    Column("updated_at", _utc(), nullable=False),
    Column("record", Json, nullable=False),
)

evidence_freezes = Table(
    "evidence_freezes",
    metadata,
    Column("freeze_id", Id, primary_key=True),
    Column("incident_id", Id, nullable=False, index=True),
    Column("run_id", Id, ForeignKey("runs.run_id"), nullable=False, index=True),
    Column("chain_head_sequence", BigInteger, nullable=False),
    Column("chain_head_hash", DigestCol, nullable=False),
    Column("retention_until", _utc(), nullable=False),
    Column("types", Json, nullable=False),
    Column("artifact_count", Integer, nullable=False),
    Column("enforced_by_backend", Boolean, nullable=False),
    Column("created_at", _utc(), nullable=False),
    Column("released_at", _utc(), nullable=True),
    # a models.freeze.FreezeRecord
    Column("record", Json, nullable=False),
)

regression_cases = Table(
    "regression_cases",
    metadata,
    Column("case_id", Id, primary_key=True),
    Column("incident_id", Id, nullable=False, index=True),
    Column("source_run_id", Id, nullable=False),
    Column("status", String(32), nullable=False, index=True),
    Column("created_at", _utc(), nullable=False),
    Column("retired_at", _utc(), nullable=True),
    Column("retired_reason", String(), nullable=True),
    # a models.regression.RegressionCase
    Column("record", Json, nullable=False),
)

# privacy (migration 0003) ---------------------------------------------------------------------

# per-subject data keys, wrapped by the key-encryption key; crypto-shredding sets wrapped_key
# to NULL (a subject deleted and seen again gets a new key)
data_keys = Table(
    "data_keys",
    metadata,
    Column("key_id", Id, primary_key=True),
    Column("subject_id", Id, nullable=False, index=True),
    Column("kek_id", Id, nullable=False),
    Column("wrapped_key", LargeBinary, nullable=True),
    Column("created_at", _utc(), nullable=False),
    Column("destroyed_at", _utc(), nullable=True),
    Column("destroyed_by_request", Id, nullable=True),
)

# raw_hash / sanitized_hash / redaction policy of every payload recorded with redaction, and the
# raw payload encrypted when it differs from the sanitized one (ciphertext inline, or an
# encrypted object in the artifact store for large payloads)
raw_payloads = Table(
    "raw_payloads",
    metadata,
    Column("raw_id", Id, primary_key=True),
    Column("run_id", Id, nullable=False, index=True),
    Column("sequence", BigInteger, nullable=True),
    Column("sanitized_hash", DigestCol, nullable=False),
    Column("raw_hash", DigestCol, nullable=False),
    Column("redaction_policy_version", String(64), nullable=False),
    Column("subject_id", Id, nullable=True, index=True),
    Column("key_id", Id, nullable=True),
    Column("ciphertext", LargeBinary, nullable=True),
    Column("ciphertext_ref", String(1024), nullable=True),
    Column("created_at", _utc(), nullable=False),
    Column("destroyed_at", _utc(), nullable=True),
    Column("destroyed_by_request", Id, nullable=True),
)

run_subjects = Table(
    "run_subjects",
    metadata,
    Column("run_id", Id, primary_key=True),
    Column("subject_id", Id, primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("source", String(255), nullable=False),
    Column("is_primary", Boolean, nullable=False),
)
Index("ix_run_subjects_subject", run_subjects.c.subject_id)

privacy_audit = Table(
    "privacy_audit",
    metadata,
    Column("audit_id", Id, primary_key=True),
    Column("at", _utc(), nullable=False, index=True),
    Column("run_id", Id, nullable=False),
    # a models.privacy.AuditRecord
    Column("record", Json, nullable=False),
    # the audit chain (migration 0004): NULL on rows written before it
    Column("position", BigInteger, nullable=True, unique=True),
    Column("previous_hash", DigestCol, nullable=True),
    Column("hash", DigestCol, nullable=True),
)

legal_holds = Table(
    "legal_holds",
    metadata,
    Column("hold_id", Id, primary_key=True),
    Column("run_id", Id, nullable=False, index=True),
    Column("placed_at", _utc(), nullable=False),
    Column("until", _utc(), nullable=True),
    Column("released_at", _utc(), nullable=True),
    # a models.privacy.LegalHold
    Column("record", Json, nullable=False),
)

deletion_receipts = Table(
    "deletion_receipts",
    metadata,
    Column("request_id", Id, primary_key=True),
    Column("subject_id", Id, nullable=False, index=True),
    Column("executed_at", _utc(), nullable=False),
    # a models.privacy.DeletionReceipt
    Column("record", Json, nullable=False),
)

# OTLP staging (migration 0005) ----------------------------------------------------------------

# one row per trace received at POST /v1/traces: ``open`` while spans arrive, ``assembling``
# once claimed (its span set is then frozen: later spans are ``late``), ``assembled`` when its
# run is written, ``failed`` when the spans could not be converted (they stay here)
otlp_traces = Table(
    "otlp_traces",
    metadata,
    Column("trace_id", String(32), primary_key=True),
    Column("state", String(16), nullable=False),
    # a span without a parent (the root, which OpenTelemetry exports when it ends) arrived
    Column("has_root", Boolean, nullable=False),
    Column("first_seen", _utc(), nullable=False),
    Column("last_seen", _utc(), nullable=False),
    Column("claimed_at", _utc(), nullable=True),
    # root_span | idle_timeout
    Column("ended_by", String(32), nullable=True),
    Column("run_id", Id, nullable=True),
    Column("error", String(), nullable=True),
)
Index("ix_otlp_traces_state", otlp_traces.c.state, otlp_traces.c.last_seen)

# each export as received (an ``ExportTraceServiceRequest`` in protobuf), one row, stored before
# the export is answered (an export sent twice is stored once: its body's digest); an export
# that brought no span not stored already is deleted when indexed
otlp_exports = Table(
    "otlp_exports",
    metadata,
    Column("export_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True),
    # sha256 of the body, hex
    Column("digest", String(64), nullable=False, unique=True),
    Column("received_at", _utc(), nullable=False),
    Column("body", LargeBinary, nullable=False),
    # the spans' trace and span ids (48 hex digits each, one after the other) and the traces
    # whose root is in it (32 each): indexing reads these, not the body
    Column("span_ids", String(), nullable=False),
    Column("roots", String(), nullable=False),
)

# exports stored but not indexed yet into otlp_spans and otlp_traces
otlp_pending_exports = Table(
    "otlp_pending_exports",
    metadata,
    Column(
        "export_id",
        BigInteger().with_variant(Integer, "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
)

# every span stored, once (by trace and span id): a row per trace and export holding the spans
# of the trace that export brought first
otlp_spans = Table(
    "otlp_spans",
    metadata,
    Column("trace_id", String(32), primary_key=True),
    Column("export_id", BigInteger, primary_key=True, autoincrement=False),
    # span ids, 16 hex digits each, one after the other
    Column("span_ids", String(), nullable=False),
    # arrived after its trace was claimed: kept, not part of the run, refused in the answer
    Column("late", Boolean, nullable=False),
)

# alert intake (migration 0006) -----------------------------------------------------------------

# one row per Alertmanager fingerprint ever taken: the incident it opened or attached to, for
# ever (a re-delivery, or the same alert firing again, finds this row and changes nothing but
# its delivery count and last time)
alert_fingerprints = Table(
    "alert_fingerprints",
    metadata,
    Column("fingerprint", String(128), primary_key=True),
    Column("incident_id", Id, nullable=False, index=True),
    # opened | attached: what its first delivery did
    Column("action", String(16), nullable=False),
    Column("alertname", String(255), nullable=True),
    # the label that chose the incident: run_id or signature
    Column("matched_by", String(16), nullable=False),
    Column("matched_value", String(512), nullable=False),
    Column("deliveries", Integer, nullable=False),
    Column("first_seen", _utc(), nullable=False),
    Column("last_seen", _utc(), nullable=False),
)

# governance log (migration 0007) --------------------------------------------------------------

# data-subject registrations, legal holds and freezes (placed, released) as one hash chain
# (``models.governance``): the rows above must agree with it
governance_log = Table(
    "governance_log",
    metadata,
    Column("position", BigInteger, primary_key=True, autoincrement=False),
    Column("run_id", Id, nullable=False, index=True),
    Column("kind", String(32), nullable=False),
    Column("subject_id", Id, nullable=True, index=True),
    Column("at", _utc(), nullable=False),
    # a models.governance.GovernanceRecord
    Column("record", Json, nullable=False),
    Column("previous_hash", DigestCol, nullable=False),
    Column("hash", DigestCol, nullable=False),
)
