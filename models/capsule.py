"""The portable incident capsule (``.rbcase``): one regression case with the sanitized evidence
its replay needs, in one self-verifying file (pure: the format, the manifest, the checks).

The file is a ZIP archive (deflated entries dated 1980-01-01, so the same content packs to the same
bytes) whose archive comment is a fixed-length signature line::

    replaybook-case-signature/1 ed25519 key=<16 hex> sig=<88 base64>

The signature covers every byte of the file before that comment, so a change to any byte (an
entry, the archive's directory, the manifest, the signature itself) is refused. Inside:

* ``manifest.json``: the ``CapsuleManifest`` — the case, the source run's chain head, and the
  ``sha256`` and size of every other entry;
* ``case.json``: the ``RegressionCase``;
* ``rows/<table>.json``: the source run's rows of each evidence table (sanitized payloads; raw
  payloads only as the ciphertext the origin holds, whose keys never leave it);
* ``artifacts/<hex>``: every artifact the run's evidence points to, named by its digest;
* ``live/<hex>.json``: answers READ tools gave the incident's own replays live
  (``sandbox-live``), so an offline replay asks no world either;
* ``audit/deletions.json``: the chained audit records of the run's destroyed raw content
  (``app.capsule_deletions``).

The checks run in a fixed order and each has a name a refusal reports: ``format``,
``signature``, ``manifest``, ``entries``, ``deletions``, then (by the reader, once the rows
are in a store) ``chain``.
"""

from __future__ import annotations

import base64
import io
import json
import re
import zipfile
from collections.abc import Mapping
from typing import Any

from pydantic import Field, JsonValue, ValidationError

from models.base import Digest, Identifier, Instant, Record
from models.canonical import canonicalize
from models.digest import sha256_digest
from models.errors import CapsuleRefusedError
from models.gate_power import DEFAULT_THRESHOLD
from models.regression import RegressionCase

CAPSULE_FORMAT = "replaybook-case/1"
CAPSULE_SUFFIX = ".rbcase"
MANIFEST_ENTRY = "manifest.json"
CASE_ENTRY = "case.json"
ROWS_DIR = "rows/"
ARTIFACTS_DIR = "artifacts/"
LIVE_DIR = "live/"
#: the checks in the order they run; a refusal names the first that failed
CHECKS = ("format", "signature", "manifest", "entries", "deletions", "chain")

_SIGNATURE_HEAD = b"replaybook-case-signature/1 ed25519 key="
_KEY_ID_LENGTH = 16
_SIG_B64_LENGTH = 88  # 64 bytes of Ed25519 signature in base64
SIGNATURE_LENGTH = len(_SIGNATURE_HEAD) + _KEY_ID_LENGTH + len(b" sig=") + _SIG_B64_LENGTH
_SIGNATURE_RE = re.compile(
    rb"^replaybook-case-signature/1 ed25519 key=([0-9a-f]{16}) sig=([A-Za-z0-9+/]{86}==)$"
)
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)


class CapsuleEntry(Record):
    path: str = Field(min_length=1)
    sha256: Digest
    size: int = Field(ge=0)


class ChainHead(Record):
    run_id: Identifier
    sequence: int = Field(ge=-1)
    hash: str


class CapsuleManifest(Record):
    format: str = CAPSULE_FORMAT
    case_id: Identifier
    incident_id: Identifier
    source_run_id: Identifier
    graph_id: Identifier
    exported_at: Instant
    #: the raw Ed25519 public key (base64) the capsule was signed with, and its id; trusting
    #: it is the reader's decision (``case verify --public-key``)
    public_key: str = Field(min_length=1)
    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    chain_heads: tuple[ChainHead, ...] = Field(min_length=1)
    #: the reproduction rate a candidate may show at most, as the gate of the store it came
    #: from decides it (``models.gate_power``), and where that came from
    threshold: float = Field(DEFAULT_THRESHOLD, ge=0, lt=1)
    threshold_source: str = "default"
    #: the incident's replays whose live READ answers the capsule carries (``live/``)
    live_from: tuple[Identifier, ...] = ()
    entries: tuple[CapsuleEntry, ...]
    #: free facts for people reading it (which tables, how many events); never checked
    notes: dict[str, JsonValue] = Field(default_factory=dict)


def key_id_of(public_key_raw: bytes) -> str:
    """The short id of an Ed25519 public key: the first 16 hex digits of its SHA-256."""
    return sha256_digest(public_key_raw)[len("sha256:") : len("sha256:") + _KEY_ID_LENGTH]


def signature_line(key_id: str, signature: bytes) -> bytes:
    """The archive comment that carries the signature (always ``SIGNATURE_LENGTH`` bytes)."""
    line = _SIGNATURE_HEAD + key_id.encode() + b" sig=" + base64.b64encode(signature)
    if len(line) != SIGNATURE_LENGTH:
        raise ValueError("an Ed25519 signature is 64 bytes and a key id 16 hex digits")
    return line


def pack_unsigned(
    manifest_fields: Mapping[str, Any], case: RegressionCase, files: Mapping[str, bytes]
) -> tuple[bytes, CapsuleManifest]:
    """The archive with a placeholder signature, and its manifest (entries filled in).
    ``files``: every entry but the manifest and the case, by path. Sign ``data[:-SIGNATURE_LENGTH]``
    and put the line at the end with ``with_signature``."""
    contents = {CASE_ENTRY: case.model_dump_json().encode(), **files}
    entries = tuple(
        CapsuleEntry(path=path, sha256=sha256_digest(data), size=len(data))
        for path, data in sorted(contents.items())
    )
    manifest = CapsuleManifest.model_validate({**manifest_fields, "entries": entries})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, data in [(MANIFEST_ENTRY, manifest_bytes(manifest)), *sorted(contents.items())]:
            info = zipfile.ZipInfo(path, date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
        archive.comment = b"0" * SIGNATURE_LENGTH
    return buffer.getvalue(), manifest


def with_signature(unsigned: bytes, line: bytes) -> bytes:
    """``unsigned`` with its placeholder comment replaced by the signature ``line``."""
    if len(line) != SIGNATURE_LENGTH:
        raise ValueError("not a signature line")
    return unsigned[:-SIGNATURE_LENGTH] + line


def manifest_bytes(manifest: CapsuleManifest) -> bytes:
    return canonicalize(manifest.model_dump(mode="json"))


def split_signature(data: bytes) -> tuple[bytes, str, bytes]:
    """``(signed bytes, key id, signature)``; ``signature`` refused when the file does not end
    with a well-formed signature line."""
    if len(data) <= SIGNATURE_LENGTH:
        raise CapsuleRefusedError("format", f"{len(data)} bytes is too short to be a capsule")
    match = _SIGNATURE_RE.match(data[-SIGNATURE_LENGTH:])
    if match is None:
        raise CapsuleRefusedError(
            "signature", "the file does not end with a well-formed replaybook-case signature line"
        )
    return data[:-SIGNATURE_LENGTH], match.group(1).decode(), base64.b64decode(match.group(2))


def read_entries(data: bytes, only: str | None = None) -> dict[str, bytes]:
    """Every entry of the archive by path, or just ``only`` (``format`` refused when it is not
    a readable ZIP, ``entries`` when an entry's stored checksum does not match its bytes)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise CapsuleRefusedError("format", f"not a readable archive: {exc}") from None
    out: dict[str, bytes] = {}
    with archive:
        for info in archive.infolist():
            if only is not None and info.filename != only:
                continue
            try:
                out[info.filename] = archive.read(info)
            except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
                raise CapsuleRefusedError(
                    "entries", f"entry {info.filename} cannot be read: {exc}"
                ) from None
            except Exception as exc:  # zlib.error and the like: a damaged deflate stream
                raise CapsuleRefusedError(
                    "entries", f"entry {info.filename} cannot be read: {exc}"
                ) from None
    return out


def parse_manifest(entries: Mapping[str, bytes]) -> CapsuleManifest:
    """The manifest entry as a record (``manifest`` refused when absent or invalid)."""
    raw = entries.get(MANIFEST_ENTRY)
    if raw is None:
        raise CapsuleRefusedError("manifest", f"no {MANIFEST_ENTRY} in the capsule")
    try:
        manifest = CapsuleManifest.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise CapsuleRefusedError("manifest", f"{MANIFEST_ENTRY} is not valid: {first}") from None
    if manifest.format != CAPSULE_FORMAT:
        raise CapsuleRefusedError(
            "manifest", f"format {manifest.format!r} is not {CAPSULE_FORMAT!r}"
        )
    return manifest


def entry_problems(manifest: CapsuleManifest, entries: Mapping[str, bytes]) -> list[str]:
    """Every way the entries differ from the manifest: a missing, changed or unlisted entry."""
    problems: list[str] = []
    listed = {e.path: e for e in manifest.entries}
    for path, entry in listed.items():
        data = entries.get(path)
        if data is None:
            problems.append(f"entry {path} is missing")
        elif len(data) != entry.size or sha256_digest(data) != entry.sha256:
            problems.append(
                f"entry {path} is {sha256_digest(data)} ({len(data)} bytes), the manifest says "
                f"{entry.sha256} ({entry.size} bytes)"
            )
    for path in sorted(set(entries) - set(listed) - {MANIFEST_ENTRY}):
        problems.append(f"entry {path} is not in the manifest")
    return problems


def parse_case(entries: Mapping[str, bytes]) -> RegressionCase:
    try:
        return RegressionCase.model_validate_json(entries[CASE_ENTRY])
    except (KeyError, ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0]
        raise CapsuleRefusedError(
            "manifest", f"{CASE_ENTRY} is not a regression case: {first}"
        ) from None


def artifact_path(digest: str) -> str:
    return ARTIFACTS_DIR + digest.removeprefix("sha256:")


def live_path(request_hash: str) -> str:
    return LIVE_DIR + request_hash.removeprefix("sha256:") + ".json"
