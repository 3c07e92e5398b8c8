"""The anchor log, outside the database and apart from the artifact store: write-once objects
in a directory or bucket of its own (``REPLAYBOOK_ANCHORS``; by default ``anchors`` under the
home directory), each entry signed with the anchor key (``stores.anchor_signing``).

Layout (under the anchor location)::

    log/<index, 12 digits>.json                    the hash-chained, signed log (models.anchor)
    run-anchors/<sha256 of the run id>/<sequence>-<index>.json
                                                   the run's copy of the entry, to find it fast

A run's entries are found from its copies, then every log entry after its newest copy is read
(all of them when it has none): deleting a run's copies hides nothing, and a copy naming an
index past the log's end says the log's newest entries were deleted. The log an earlier version
wrote beside the artifacts (``anchors/`` in the artifact store, unsigned) is still read for the
runs it anchored, and reported as unsigned.

A run's directory is named by a digest of its id: a fixed-length name whatever the id (an id of
the documented pattern, quoted, could pass the file system's 255-byte limit on a name: "File
name too long"). Entries written under ``anchors/runs/<quoted run id>/`` by earlier versions
are still read.

Entries are written once and never replaced (``stores.anchor_objects``). Who can change what,
and what detects it: docs/threat-model.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import quote

from models.anchor import (
    ANCHOR_GENESIS,
    Anchor,
    AnchorEntry,
    RunAnchor,
    entry_problem,
    verify_anchor_log,
)
from models.chain import VerificationProblem
from models.errors import ConfigurationError, ConflictError, IntegrityError, StoreError
from runtime.ports import ArtifactStore
from stores.anchor_objects import LocalObjects, Objects, S3Objects
from stores.anchor_signing import AnchorKeys
from stores.artifacts import LocalArtifactStore, S3ArtifactStore, open_artifact_store

__all__ = ["AnchorLog", "S3Access", "anchor_log_at", "legacy_anchor_log", "open_anchor_log"]

_APPEND_ATTEMPTS = 20
#: log entries a process keeps once read (written once, they never change)
_CACHED_ENTRIES = 100_000


class AnchorLog:
    """Append signed anchors; find a run's latest; verify the whole log."""

    def __init__(
        self, objects: Objects, keys: AnchorKeys | None = None, *, legacy: AnchorLog | None = None
    ) -> None:
        self.objects = objects
        self.location = objects.location
        #: signs new entries and checks signed ones (None: an unsigned log, read only)
        self.keys = keys
        #: the unsigned log an earlier version wrote beside the artifacts (read only)
        self.legacy = legacy
        self._read: dict[str, AnchorEntry] = {}  # entries are written once: read once

    async def ensure_location(self) -> None:
        """Create the anchor bucket (with Object Lock) when it is one and does not exist."""
        if isinstance(self.objects, S3Objects):
            await self.objects.store.ensure_bucket(object_lock=True)

    @property
    def can_sign(self) -> bool:
        return self.keys is not None and self.keys.can_sign

    @property
    def key_id(self) -> str | None:
        return None if self.keys is None else self.keys.key_id

    async def append(self, anchor: Anchor) -> AnchorEntry:
        """Append ``anchor`` after the log's last entry, signed (a concurrent writer that takes
        the index first makes this one try the next index)."""
        if self.keys is None:
            raise ConfigurationError(f"anchor log {self.location} has no signing key")
        for _ in range(_APPEND_ATTEMPTS):
            names = await self.objects.names("log/")
            previous, index = ANCHOR_GENESIS, 1
            if names:
                last = await self._entry(f"log/{names[-1]}")
                previous, index = last.hash, last.index + 1
            entry = self.keys.signed_entry(anchor, index, previous)
            data = entry.model_dump_json().encode()
            if await self.objects.create(f"log/{index:012d}.json", data):
                await self.objects.create(
                    f"{_run_dir(anchor.run_id)}{anchor.sequence:012d}-{index:012d}.json", data
                )
                return entry
        raise ConflictError(f"anchor log {self.location}: too many concurrent appends")

    async def latest(self, run_id: str) -> AnchorEntry | None:
        """The run's newest valid entry (a forged one is skipped: ``run_anchor`` names it), else
        its entry in the legacy log, or None."""
        return (await self.run_anchor(run_id)).entry

    async def _newest_copy(self, run_id: str) -> AnchorEntry | None:
        """The run's copy with the highest sequence, then index (unchecked: the legacy log's
        runs are found this way, as its version did)."""
        found = [
            (name, where) for where in _run_dirs(run_id) for name in await self.objects.names(where)
        ]
        if not found:
            return None
        name, where = max(found)
        return await self._entry(f"{where}{name}")

    async def run_anchor(self, run_id: str) -> RunAnchor:
        """The run's newest valid entry, found in the log itself (module docstring), with the
        problems met: a forged entry of the run, a copy naming an entry the log lost."""
        # the copies first: an append writes its log entry before its copy, so a concurrent
        # one never shows a copy past the end of the log listed after it
        copies = {
            _copy_index(name): f"{where}{name}"
            for where in _run_dirs(run_id)
            for name in await self.objects.names(where)
        }
        indexes: dict[int, str] = {}
        for name in await self.objects.names("log/"):
            index = _log_index(name)
            if index is not None:  # another name is no entry: ``verify`` names it
                indexes[index] = name
        end = max(indexes, default=0)
        problems: list[VerificationProblem] = []
        newest: AnchorEntry | None = None
        lost = sorted(i for i in copies if i > end)
        for index in lost:
            problems.append(
                _problem(
                    f"anchor log entry {index} of run {run_id} is missing: the log "
                    f"{self.location} ends at entry {end} (its newest entries were deleted)"
                )
            )
            copy = await self._entry(copies[index])
            if self._problem(copy) is None:
                newest = copy  # a valid copy still says what the run's head was
        start = max((i for i in copies if i <= end), default=1)
        for index in range(start, end + 1):  # where a newer anchor of the run could have been
            if index not in indexes:
                problems.append(
                    _problem(
                        f"anchor log entry {index} is missing from {self.location} (deleted: "
                        f"it may have held a newer anchor of run {run_id})"
                    )
                )
        after = [indexes[i] for i in sorted(indexes) if i >= start]
        newest = await self._scan(run_id, after, newest, problems)
        if newest is None and start > 1:  # the newest were forged: the valid one before them
            before = [indexes[i] for i in sorted(indexes) if i < start]
            newest = await self._scan(run_id, before, None, problems)
        if newest is None and not problems and self.legacy is not None:
            old = await self.legacy._newest_copy(run_id)
            if old is not None:
                return RunAnchor(location=self.legacy.location, entry=old, legacy=True)
        return RunAnchor(
            location=self.location,
            entry=newest,
            signed=newest is not None and newest.signed,
            problems=tuple(problems),
        )

    async def _scan(
        self,
        run_id: str,
        names: list[str],
        newest: AnchorEntry | None,
        problems: list[VerificationProblem],
    ) -> AnchorEntry | None:
        """The run's newest valid entry among the log's ``names`` (or ``newest``), each forged
        one a problem."""
        for name in names:
            entry = await self._entry(f"log/{name}")
            if entry.anchor.run_id != run_id:
                continue
            problem = self._problem(entry) or await self._unsigned_after_signed(entry)
            if problem is not None:
                problems.append(_problem(f"{problem} ({self.location}, run {run_id})"))
            elif newest is None or entry.index > newest.index:
                newest = entry
        return newest

    async def entries(self) -> list[AnchorEntry]:
        """Every entry, read afresh."""
        return [await self._entry(f"log/{n}", fresh=True) for n in await self.objects.names("log/")]

    async def verify(self) -> tuple[list[AnchorEntry], list[VerificationProblem]]:
        """The log's chain and signatures, and every run's copy against the log (a copy past
        the log's end: its newest entries were deleted)."""
        copies = await self.objects.tree("run-anchors/")  # first, as in ``run_anchor``
        entries = await self.entries()
        problems = verify_anchor_log(entries, None if self.keys is None else self.keys.check)
        by_index = {e.index: e for e in entries}
        for name in copies:
            copy = await self._entry(f"run-anchors/{name}", fresh=True)
            logged = by_index.get(copy.index)
            if logged is None:
                problems.append(
                    _problem(
                        f"anchor log entry {copy.index} (of run {copy.anchor.run_id}) is missing: "
                        f"the log {self.location} ends at entry {len(entries)} "
                        "(its newest entries were deleted)"
                    )
                )
            elif logged != copy:
                problems.append(
                    _problem(f"run-anchors/{name} differs from anchor log entry {copy.index}")
                )
        return entries, problems

    def _problem(self, entry: AnchorEntry) -> str | None:
        return entry_problem(entry, None if self.keys is None else self.keys.check)

    async def _unsigned_after_signed(self, entry: AnchorEntry) -> str | None:
        if self.keys is None or entry.signed or entry.index == 1:
            return None
        data = await self.objects.read(f"log/{entry.index - 1:012d}.json")
        try:
            before_signed = data is None or AnchorEntry.model_validate_json(data).signed
        except ValueError:
            before_signed = True
        if before_signed:
            return f"anchor log entry {entry.index} is forged: unsigned after signed entries"
        return None

    async def _entry(self, name: str, *, fresh: bool = False) -> AnchorEntry:
        cached = None if fresh else self._read.get(name)
        if cached is not None:
            return cached
        data = await self.objects.read(name)
        if data is None:
            raise StoreError(f"anchor {name} vanished from {self.location}")
        try:
            entry = AnchorEntry.model_validate_json(data)
        except ValueError as exc:
            raise IntegrityError(
                f"anchor {name} in {self.location} is not an anchor entry"
            ) from exc
        if len(self._read) >= _CACHED_ENTRIES:  # a long-lived process: bounded memory
            self._read.clear()
        self._read[name] = entry
        return entry


def _problem(message: str) -> VerificationProblem:
    return VerificationProblem(sequence=None, kind="anchor", message=message)


def _log_index(name: str) -> int | None:
    """The index a log entry's name ``<index>.json`` says (None: not such a name)."""
    stem = name.removesuffix(".json")
    return int(stem) if stem.isdigit() and name.endswith(".json") else None


def _copy_index(name: str) -> int:
    """The log index a run's copy ``<sequence>-<index>.json`` names."""
    try:
        return int(name.removesuffix(".json").rsplit("-", 1)[1])
    except (IndexError, ValueError):
        raise IntegrityError(f"anchor copy {name} is not named <sequence>-<index>.json") from None


def _run_dir(run_id: str) -> str:
    """Where the run's anchors are written (module docstring)."""
    return f"run-anchors/{hashlib.sha256(run_id.encode()).hexdigest()}/"


#: the longest quoted run id an earlier version could have written a directory for
_NAME_LIMIT = 255


def _run_dirs(run_id: str) -> list[str]:
    """Where the run's anchors may be: where they are written, and where earlier versions
    wrote them (when that name can exist at all)."""
    quoted = quote(run_id, safe="")
    legacy = [f"runs/{quoted}/"] if len(quoted) <= _NAME_LIMIT else []
    return [_run_dir(run_id), *legacy]


def legacy_anchor_log(artifacts: ArtifactStore) -> AnchorLog | None:
    """The unsigned log an earlier version wrote beside ``artifacts`` (None: not there)."""
    if isinstance(artifacts, LocalArtifactStore):
        root = artifacts.root / "anchors"
        return AnchorLog(LocalObjects(root)) if root.is_dir() else None
    if isinstance(artifacts, S3ArtifactStore):
        return AnchorLog(S3Objects(artifacts, "anchors/"))
    return None


def open_anchor_log(
    store: ArtifactStore, keys: AnchorKeys | None, *, legacy: AnchorLog | None = None
) -> AnchorLog:
    """The anchor log at the root of ``store``, a directory or bucket given to the anchors
    alone (``anchor_log_at``), signed with ``keys``."""
    if isinstance(store, LocalArtifactStore):
        return AnchorLog(LocalObjects(store.root), keys, legacy=legacy)
    if isinstance(store, S3ArtifactStore):
        return AnchorLog(S3Objects(store), keys, legacy=legacy)
    raise ConfigurationError(f"no anchor log can live in {store.location}")


@dataclass(frozen=True)
class S3Access:
    """The endpoint and credentials of an S3 anchor location (the artifact store's)."""

    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None

    def open(self, location: str) -> ArtifactStore:
        return open_artifact_store(
            location,
            s3_endpoint_url=self.endpoint_url,
            s3_access_key=self.access_key,
            s3_secret_key=self.secret_key,
        )


def anchor_store(
    location: str, artifacts_location: str | None = None, s3: S3Access | None = None
) -> ArtifactStore:
    """The directory or bucket of ``REPLAYBOOK_ANCHORS``; refused when it is, or is inside,
    the artifact store (whoever writes the artifacts must not reach the anchors)."""
    s3 = s3 or S3Access()
    try:
        store = s3.open(location)
    except ConfigurationError as exc:
        raise ConfigurationError(f"REPLAYBOOK_ANCHORS: {exc}", field=_VARIABLE) from None
    if artifacts_location is not None:
        artifacts = s3.open(artifacts_location)
        if _overlap(store, artifacts):
            raise ConfigurationError(
                f"REPLAYBOOK_ANCHORS {store.location} overlaps the artifact store "
                f"{artifacts.location}: the anchors need a directory or bucket of their own",
                field=_VARIABLE,
            )
    return store


_VARIABLE = "REPLAYBOOK_ANCHORS"


def _overlap(a: ArtifactStore, b: ArtifactStore) -> bool:
    if isinstance(a, LocalArtifactStore) and isinstance(b, LocalArtifactStore):
        x, y = a.root.resolve(), b.root.resolve()
        return x == y or x.is_relative_to(y) or y.is_relative_to(x)
    if isinstance(a, S3ArtifactStore) and isinstance(b, S3ArtifactStore):
        return a.bucket == b.bucket
    return False


def anchor_log_at(
    location: str,
    keys: AnchorKeys | None,
    *,
    artifacts: ArtifactStore | None = None,
    artifacts_location: str | None = None,
    s3: S3Access | None = None,
) -> AnchorLog:
    """The anchor log at ``location``, apart from the artifact store at ``artifacts_location``
    (whose legacy log, beside ``artifacts``, is still read)."""
    store = anchor_store(location, artifacts_location, s3)
    legacy = legacy_anchor_log(artifacts) if artifacts is not None else None
    return open_anchor_log(store, keys, legacy=legacy)
