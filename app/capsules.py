"""Incident capsules (``.rbcase``, ``models.capsule``): export a regression case with the
evidence its replay needs, open one (every check, in order, each named when it fails), bring
one back into a store, and list the cases a store holds. A run whose raw content was
destroyed travels with the audit records of those deletions (``app.capsule_deletions``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.capsule_deletions import DELETIONS_ENTRY, carried_deletions, check_deletions
from app.regression import case_threshold
from models import RunStatus
from models.capsule import (
    LIVE_DIR,
    MANIFEST_ENTRY,
    ROWS_DIR,
    CapsuleManifest,
    ChainHead,
    artifact_path,
    entry_problems,
    live_path,
    pack_unsigned,
    parse_case,
    parse_manifest,
    read_entries,
    signature_line,
    split_signature,
    with_signature,
)
from models.digest import sha256_digest
from models.errors import CapsuleRefusedError, ReplaybookError
from models.regression import RegressionCase, evaluate_case
from runtime.evidence_refs import collect_references
from runtime.trajectory import load_trajectory
from stores.case_signing import (
    CaseSigningKey,
    public_from_raw,
    public_key_id,
    public_raw,
    verify_signature,
)
from stores.sql.capsule_rows import (
    export_run_evidence,
    import_run_rows,
    live_read_answers,
    newest_gate_replay,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from stores.bundle import Stores


@dataclass(frozen=True)
class OpenedCapsule:
    """A capsule whose format, signature, manifest and entries checked out."""

    manifest: CapsuleManifest
    case: RegressionCase
    entries: dict[str, bytes]
    #: how the signing key was trusted: ``"given"`` (a public key the reader named) or
    #: ``"embedded"`` (the capsule's own: integrity without authorship)
    trust: str

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        return {
            path[len(ROWS_DIR) : -len(".json")]: json.loads(data)
            for path, data in self.entries.items()
            if path.startswith(ROWS_DIR)
        }

    def artifacts(self) -> dict[str, bytes]:
        return {
            "sha256:" + path.rsplit("/", 1)[1]: data
            for path, data in self.entries.items()
            if path.startswith("artifacts/")
        }

    def live_answers(self) -> list[dict[str, Any]]:
        return [json.loads(d) for p, d in sorted(self.entries.items()) if p.startswith(LIVE_DIR)]

    def deletions(self) -> list[dict[str, Any]]:
        """The chained audit records of the run's destroyed raw content (checked on opening)."""
        return carried_deletions(self.entries)


async def export_case(
    stores: Stores, case_id: str, key: CaseSigningKey, *, now: datetime | None = None
) -> tuple[bytes, CapsuleManifest]:
    """The signed capsule of regression case ``case_id``: its source run's rows and every
    artifact they reference, the live READ answers its incident's replays got, the chained
    records of its destroyed raw content, the chain head. The source run must verify
    (``CapsuleRefusedError`` otherwise: broken evidence is not shipped)."""
    case = await stores.incidents.get_case(case_id)
    run_id = case.source_run_id
    verification = await stores.ledger.verify(run_id)
    if not verification.intact:
        raise CapsuleRefusedError(
            "chain", f"run {run_id} of case {case_id} does not verify: {verification.summary()}"
        )
    rows, deletions = await export_run_evidence(stores.db, run_id)
    digests = await collect_references(stores.ledger, stores.evidence, run_id)
    digests |= {r["ciphertext_ref"] for r in rows["raw_payloads"] if r["ciphertext_ref"]}
    files: dict[str, bytes] = {
        ROWS_DIR + name + ".json": _json(table_rows) for name, table_rows in rows.items()
    }
    files[DELETIONS_ENTRY] = _json(deletions)
    # the reader's check, made before signing: a capsule whose rows and deletions disagree
    # (a deletion between the verification above and the read) is never signed
    check_deletions(run_id, files)
    for digest in sorted(d.removeprefix("cas:") for d in digests):
        files[artifact_path(digest)] = await stores.artifacts.get(digest)
    answers, live_from = await live_read_answers(stores.db, run_id)
    threshold, threshold_source = await case_threshold(stores, case)
    for answer in answers:
        files[live_path(answer["request_hash"])] = _json(answer)
    raw_key = public_raw(key.public)
    unsigned, manifest = pack_unsigned(
        {
            "case_id": case.case_id,
            "incident_id": case.incident_id,
            "source_run_id": run_id,
            "graph_id": rows["runs"][0]["graph_id"],
            "exported_at": now or datetime.now(UTC),
            "public_key": base64.b64encode(raw_key).decode(),
            "key_id": public_key_id(key.public),
            "chain_heads": [
                ChainHead(
                    run_id=run_id,
                    sequence=verification.head_sequence,
                    hash=verification.head_hash,
                )
            ],
            "threshold": threshold,
            "threshold_source": threshold_source,
            "live_from": live_from,
            "notes": {
                "events": verification.event_count,
                "rows": {name: len(r) for name, r in rows.items()},
                "artifacts": len(digests),
                "live_answers": len(answers),
                "deletions": len(deletions),
            },
        },
        case,
        files,
    )
    signed_part = unsigned[: -len(signature_line(manifest.key_id, bytes(64)))]
    data = with_signature(unsigned, signature_line(manifest.key_id, key.sign(signed_part)))
    return data, manifest


def open_capsule(data: bytes, trusted: Ed25519PublicKey | None = None) -> OpenedCapsule:
    """Check ``data`` in order — ``format``, ``signature`` (with ``trusted``, else with the key
    the capsule names), ``manifest``, ``entries``, ``deletions`` (its destroyed raw rows
    against the deletion records it carries) — and return it opened;
    ``CapsuleRefusedError`` naming the first check that failed (a broken signature also says
    which entry differs, when that can be told)."""
    signed, key_id, signature = split_signature(data)
    key = trusted
    if key is None:
        # the manifest alone: a changed byte elsewhere is the signature's to report
        manifest = parse_manifest(read_entries(data, only=MANIFEST_ENTRY))
        try:
            key = public_from_raw(base64.b64decode(manifest.public_key))
        except ValueError as exc:
            raise CapsuleRefusedError("manifest", f"public_key is not a key: {exc}") from None
    if public_key_id(key) != key_id:
        raise CapsuleRefusedError(
            "signature", f"signed with key {key_id}, not with the given key {public_key_id(key)}"
        )
    if not verify_signature(key, signature, signed):
        raise CapsuleRefusedError(
            "signature",
            f"the capsule's bytes are not the bytes key {key_id} signed{_where_changed(data)}",
        )
    entries = read_entries(data)
    manifest = parse_manifest(entries)
    problems = entry_problems(manifest, entries)
    if problems:
        raise CapsuleRefusedError("entries", "; ".join(problems))
    if manifest.key_id != key_id:
        raise CapsuleRefusedError("manifest", f"key_id {manifest.key_id} is not {key_id}")
    case = parse_case(entries)
    if case.case_id != manifest.case_id or case.source_run_id != manifest.source_run_id:
        raise CapsuleRefusedError("manifest", "case.json is not the case the manifest names")
    check_deletions(manifest.source_run_id, entries)
    return OpenedCapsule(manifest, case, entries, "given" if trusted is not None else "embedded")


def _where_changed(data: bytes) -> str:
    """Which entry differs from its manifest line, when the archive can still be read."""
    try:
        entries = read_entries(data)
        problems = entry_problems(parse_manifest(entries), entries)
    except ReplaybookError as exc:
        return f" ({exc})"
    return f" ({problems[0]})" if problems else " (outside the entries: the archive's directory)"


async def import_capsule(stores: Stores, capsule: OpenedCapsule, *, with_case: bool = True) -> str:
    """Put the capsule's artifacts and rows into ``stores`` and its deletion records into the
    store's audit chain, check its chain there (``chain`` refused when it does not verify or
    its head is not the manifest's), anchor the audit chain's new head (when the store signs
    anchors), and store its case (``with_case``). Returns the source run's id. A run already
    in the store is refused."""
    for digest, blob in sorted(capsule.artifacts().items()):
        stored = await stores.artifacts.put(blob)
        if stored != digest:  # the entries check makes this impossible; never trust it blindly
            raise CapsuleRefusedError("entries", f"artifact {digest} hashes to {stored}")
    deletions = capsule.deletions()
    await import_run_rows(stores.db, capsule.rows(), deletions)
    await check_chain(stores, capsule.manifest)
    if deletions and stores.anchors is not None and stores.anchors.can_sign:
        await stores.privacy_records.anchor_audit_head()
    if with_case:
        await stores.incidents.put_case(capsule.case)
    return capsule.manifest.source_run_id


async def check_chain(stores: Stores, manifest: CapsuleManifest) -> None:
    for head in manifest.chain_heads:
        verification = await stores.ledger.verify(head.run_id)
        if not verification.intact:
            raise CapsuleRefusedError(
                "chain", f"run {head.run_id} does not verify: {verification.summary()}"
            )
        if (verification.head_sequence, verification.head_hash) != (head.sequence, head.hash):
            raise CapsuleRefusedError(
                "chain",
                f"run {head.run_id} ends at {verification.head_sequence} "
                f"{verification.head_hash}, the manifest says {head.sequence} {head.hash}",
            )


async def list_cases(stores: Stores) -> list[dict[str, Any]]:
    """Every regression case: id, incident, status, and the last gate result recorded for it
    (its newest ``regress`` replay's verdict, when the gate replayed it)."""
    store = stores.incidents
    out = []
    for case in await store.list_cases():
        out.append(
            {
                "case_id": case.case_id,
                "incident_id": case.incident_id,
                "source_run_id": case.source_run_id,
                "status": case.status.value,
                "description": case.description,
                "assertions": len(case.assertions),
                "last_gate": await _last_gate(stores, case),
            }
        )
    return out


async def _last_gate(stores: Stores, case: RegressionCase) -> dict[str, Any] | None:
    """The newest gate replay of the case and what it showed: ``PASSED`` (every assertion
    held), ``FAILED`` (with the first broken assertion) or ``INCONCLUSIVE`` (it did not end)."""
    gate = await newest_gate_replay(stores.db, case.source_run_id)
    if gate is None:
        return None
    if gate["status"] != RunStatus.COMPLETED.value:
        return {**gate, "result": "INCONCLUSIVE"}
    checked = evaluate_case(case, await load_trajectory(stores.ledger, gate["replay_id"]))
    if checked.passed:
        return {**gate, "result": "PASSED"}
    first = checked.failures[0]
    return {**gate, "result": "FAILED", "broken": f"{first.assertion}: {first.reason}"}


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def capsule_digest(data: bytes) -> str:
    return sha256_digest(data)


def capsule_summary(capsule: OpenedCapsule, data: Sequence[int] | bytes) -> dict[str, Any]:
    """What ``case verify`` prints: the case, the run, the key and what the capsule holds."""
    m = capsule.manifest
    return {
        "case_id": m.case_id,
        "incident_id": m.incident_id,
        "source_run_id": m.source_run_id,
        "graph_id": m.graph_id,
        "key_id": m.key_id,
        "trust": capsule.trust,
        "chain_heads": [h.model_dump() for h in m.chain_heads],
        "entries": len(m.entries),
        "deletions": len(capsule.deletions()),
        "bytes": len(data),
        "sha256": sha256_digest(bytes(data)),
        "notes": m.notes,
    }
