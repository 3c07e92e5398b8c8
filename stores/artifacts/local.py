"""A content-addressed artifact store in a local directory.

Layout under ``root``::

    sha256/<2 hex>/<62 hex>                    the object (read-only file)
    locks/sha256/<2 hex>/<62 hex>.legal-hold   present while the legal hold is on
    locks/sha256/<2 hex>/<62 hex>.retain-until the retain-until date (ISO 8601, UTC)

Holds and retention are enforced by this code only (``enforced_by_backend()`` is False): anyone
with write access to the directory can still remove files.

A new object is written straight to its path (exclusive create, fsync, then the directory's
fsync) and reported durable only after both: on a journalling filesystem the name and the
bytes reach the disk in one journal commit, where a temporary file renamed into place needs a
second one for the rename (a write tool call waits for the puts of the model call before it:
issue 35 item 7). A put cut short by a crash can therefore leave a short file at an object's
path; nothing references it (its put never returned), every ``get`` refuses it (the bytes are
checked against the name), and the next put of those bytes replaces it whole, through a
temporary file renamed over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import stat
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path

from models.digest import digest_hex, sha256_digest, verify_content
from models.errors import (
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    EvidenceLockedError,
    InvalidInputError,
    StoreError,
)
from stores.artifacts.writers import write_soon, writing


def strict_digest_hex(digest: str) -> str:
    """``digest_hex`` that also refuses a trailing newline (``is_digest`` lets one through)."""
    hex_ = digest_hex(digest)
    if len(hex_) != 64:
        raise InvalidInputError(f"not a sha256 digest: {digest!r} (expected 'sha256:' + 64 hex)")
    return hex_


def normalize_retain_until(until: datetime) -> datetime:
    """``until`` in UTC, rounded *up* to a whole second (S3 keeps seconds; never shorten)."""
    if not isinstance(until, datetime) or until.tzinfo is None or until.utcoffset() is None:
        raise InvalidInputError(f"retention date must be a timezone-aware datetime, got {until!r}")
    until = until.astimezone(UTC)
    if until.microsecond:
        until = until.replace(microsecond=0) + timedelta(seconds=1)
    return until


def check_bytes(data: object) -> bytes:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidInputError(f"artifact data must be bytes, got {type(data).__name__}")
    return bytes(data)


#: files up to this size are read on the event loop's thread: from the page cache that takes a
#: few microseconds, less than handing the read to a worker thread and back (two GIL hand-offs,
#: which dominated a replay step's wall time); larger ones still go to a thread
INLINE_IO_BYTES = 64 * 1024


def _intact_copy(path: str, digest: str) -> bool:
    """Whether ``path`` holds the object ``digest`` (small files only: read inline)."""
    try:
        return 0 <= _file_size(path) <= INLINE_IO_BYTES and _holds(path, digest)
    except OSError:
        return False


def _file_size(path: str) -> int:
    """The size of the regular file at ``path``, -1 when there is none. By the C extension,
    which keeps the GIL: this runs on the event loop's thread at every put of new bytes, and
    ``os.stat`` gave the GIL up, for the writer threads to keep it a while."""
    if _durable_native is not None:
        return int(_durable_native.file_size(os.fsencode(path)))
    try:
        found = os.stat(path)
    except OSError:
        return -1
    return found.st_size if stat.S_ISREG(found.st_mode) else -1


def _holds(path: str, digest: str) -> bool:
    """Whether the file at ``path`` is there and hashes to ``digest``."""
    existing = _read_if_there(path)
    return existing is not None and sha256_digest(existing) == digest


#: digests a store remembers as stored (``LocalArtifactStore._known``) before it forgets them
#: all and checks the files again: about 150 bytes each, a bound on memory however many runs
#: a worker records
KNOWN_DIGESTS = 100_000


#: numbers of temporary files (with the process id, unique to a write of this process)
_temp_numbers = itertools.count()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def _write_fd(fd: int, data: bytes, mode: int) -> None:
    """All of ``data`` written to ``fd``, the file given exactly ``mode`` (whatever the
    umask) and fsynced."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fchmod(fd, mode)
    os.fsync(fd)


def _atomic_write(path: str | Path, data: bytes, mode: int = 0o444) -> None:
    """Write ``data`` to ``path`` via a temp file in the same directory, fsync and rename,
    then fsync the directory. As few system calls as that takes: a writer thread waits for
    the GIL again after each, while the event loop's thread runs the agent."""
    fd, tmp = _create_temp(path, mode)
    try:
        try:
            _write_fd(fd, data, mode)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_directory(os.path.dirname(path))


def _write_new(path: str, data: bytes, mode: int = 0o444) -> bool:
    """Write ``data`` as a new file at ``path`` (exclusive create), fsync it, then its
    directory: True once both are durable, False (nothing written) when a file is there
    already. A failed write removes what it created. The directory is made when missing."""
    directory = os.path.dirname(path)
    try:
        return _create_synced(path, data, mode, directory)
    except FileNotFoundError as e:
        if e.filename != path:
            raise
    os.makedirs(directory, exist_ok=True)
    _fsync_directory(os.path.dirname(directory))  # the new directory's own entry
    return _create_synced(path, data, mode, directory)


def _create_synced_py(path: str, data: bytes, mode: int, directory: str) -> bool:
    """``_write_new`` in a directory that exists (FileNotFoundError naming ``path`` when it
    does not): the pure-Python path of ``_durable_native.write_new``, used where the
    extension could not be built."""
    try:
        fd = os.open(path, _CREATE, mode)
    except FileExistsError:
        return False
    try:
        _write_fd(fd, data, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            _remove_if_still_ours(path, fd)
        raise
    finally:
        os.close(fd)
    _fsync_directory(directory)
    return True


def _create_synced_native(path: str, data: bytes, mode: int, directory: str) -> bool:
    """``_create_synced_py`` as one C call that gives the GIL up once: each ``os`` call above
    takes it back after its system call, and waits up to the switch interval for it while the
    event loop's thread runs the agent (``_durable_native.c`` says why that mattered)."""
    assert _durable_native is not None
    return bool(_durable_native.write_new(os.fsencode(path), data, mode, os.fsencode(directory)))


_durable_native: types.ModuleType | None
try:  # built by setup.py (optional: where it cannot be compiled, the Python path is used)
    from stores.artifacts import _durable_native
except ImportError:  # pragma: no cover - the extension is built wherever the suite runs
    _durable_native = None

#: whether new artifacts are written by the C extension
NATIVE_WRITES = _durable_native is not None
_create_synced = _create_synced_native if NATIVE_WRITES else _create_synced_py


def _remove_if_still_ours(path: str, fd: int) -> None:
    """Remove the file this failed write created at ``path`` — unless another process has
    meanwhile found it short and replaced it whole (``_atomic_write``): that copy is an
    object someone may already reference, and stays."""
    ours, there = os.fstat(fd), os.stat(path)
    if (ours.st_dev, ours.st_ino) == (there.st_dev, there.st_ino):
        os.unlink(path)


def _sync_existing(path: str) -> None:
    """Make a copy found at ``path`` durable (another process may have written it and not
    synced it yet): a file and a directory with nothing pending sync at no cost."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_directory(os.path.dirname(path))


def _fsync_directory(directory: str) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _create_temp(path: str | Path, mode: int) -> tuple[int, str]:
    """A new temporary file beside ``path`` (its directory made when missing), open for
    writing."""
    directory, name = os.path.split(path)
    while True:
        tmp = f"{directory}/.{name}.{os.getpid()}-{next(_temp_numbers)}.tmp"
        try:
            return os.open(tmp, _CREATE, mode), tmp
        except FileNotFoundError:
            os.makedirs(directory, exist_ok=True)
        except FileExistsError:  # left by a process that had this id: take the next name
            continue


def _read_if_there(path: str) -> bytes | None:
    """The bytes of the file at ``path``, None when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class LocalArtifactStore:
    """``ArtifactStore`` on a local directory; see the module docstring for the layout."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.location = self.root.as_uri()
        self._root = str(self.root)
        #: digests this store wrote or found intact (durable): a put of them again returns at
        #: once, with no file system call on the event loop's thread (a worker records the
        #: same prompts, catalogues and states run after run). Forgotten by ``delete`` and by
        #: a ``get`` that finds the object missing or corrupted, so a put after either repairs
        #: it; a file changed behind the store's back is still refused by every ``get``.
        self._known: set[str] = set()

    def __repr__(self) -> str:
        return f"LocalArtifactStore({str(self.root)!r})"

    # -- paths ---------------------------------------------------------------------------------

    def path_for(self, digest: str) -> Path:
        """The file holding ``digest`` (validates the digest)."""
        hex_ = strict_digest_hex(digest)
        return self.root / "sha256" / hex_[:2] / hex_[2:]

    def _lock_path(self, digest: str, suffix: str) -> Path:
        hex_ = strict_digest_hex(digest)
        return self.root / "locks" / "sha256" / hex_[:2] / f"{hex_[2:]}.{suffix}"

    def _require(self, digest: str) -> Path:
        path = self.path_for(digest)
        if not path.is_file():
            raise ArtifactNotFoundError(f"artifact {digest} not found in {self.location}")
        return path

    # -- objects -------------------------------------------------------------------------------

    async def put(self, data: bytes) -> str:
        data = check_bytes(data)
        digest = sha256_digest(data)  # valid: no need to check it (the path is made there)
        if digest in self._known:
            return digest
        key = f"{self._root}/{digest}"
        if (
            len(data) <= INLINE_IO_BYTES
            and writing(key) is None  # a write of it by this process ended durable
            and _intact_copy(self._object_path(digest), digest)
        ):
            self._remember(digest)
            return digest  # already stored (a replay re-records its source's artifacts)
        # not cancelled with the caller: another put of the same bytes may wait for it
        return await asyncio.wrap_future(
            write_soon(key, functools.partial(self._put_sync, data, digest))
        )

    def _remember(self, digest: str) -> None:
        """Note ``digest`` as durable in this store (called on the loop or a writer thread:
        a set's add and clear are atomic under the GIL)."""
        if len(self._known) >= KNOWN_DIGESTS:
            self._known.clear()
        self._known.add(digest)

    def _object_path(self, digest: str) -> str:
        """``path_for`` of a digest known valid, without pathlib (it runs on every put)."""
        hex_ = digest[7:]
        return f"{self._root}/sha256/{hex_[:2]}/{hex_[2:]}"

    def _put_sync(self, data: bytes, digest: str) -> str:
        path = self._object_path(digest)
        try:
            # Content-addressed: an intact copy is already the object (made durable here, as
            # its writer may not have synced it yet). A corrupted or short one is replaced
            # whole. (One this process is writing is waited for: ``write_soon``.)
            if not _write_new(path, data):
                if _holds(path, digest):
                    _sync_existing(path)
                else:
                    _atomic_write(path, data)
        except OSError as e:
            raise StoreError(f"cannot write artifact {digest} to {self.location}: {e}") from e
        self._remember(digest)  # durable: file and directory synced
        return digest

    async def get(self, digest: str) -> bytes:
        path = self.path_for(digest)
        try:
            size = os.stat(path).st_size
            data = (
                path.read_bytes()
                if size <= INLINE_IO_BYTES
                else await asyncio.to_thread(path.read_bytes)
            )
        except FileNotFoundError as e:
            self._known.discard(digest)  # a put of it writes it again
            raise ArtifactNotFoundError(f"artifact {digest} not found in {self.location}") from e
        except OSError as e:
            raise StoreError(f"cannot read artifact {digest} from {self.location}: {e}") from e
        try:
            return verify_content(data, digest, f"artifact {digest} in {self.location}")
        except ArtifactIntegrityError:
            self._known.discard(digest)  # a put of it replaces the corrupted copy
            raise

    async def exists(self, digest: str) -> bool:
        return self.path_for(digest).is_file()

    async def delete(self, digest: str) -> None:
        """Delete the object; a no-op when absent; ``EvidenceLockedError`` when locked."""
        path = self.path_for(digest)
        if not path.is_file():
            self._known.discard(digest)
            return
        reasons = []
        if await self.legal_hold(digest):
            reasons.append("it is under legal hold")
        until = await self.retention(digest)
        if until is not None and until > datetime.now(UTC):
            reasons.append(f"it is retained until {until.isoformat()}")
        if reasons:
            raise EvidenceLockedError(
                f"refusing to delete artifact {digest}: {' and '.join(reasons)}"
            )
        self._known.discard(digest)
        try:
            path.unlink(missing_ok=True)
            self._lock_path(digest, "retain-until").unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"cannot delete artifact {digest} from {self.location}: {e}") from e

    # -- legal hold and retention --------------------------------------------------------------

    async def set_legal_hold(self, digest: str, on: bool) -> None:
        self._require(digest)
        hold = self._lock_path(digest, "legal-hold")
        try:
            if on:
                if not hold.exists():
                    _atomic_write(hold, datetime.now(UTC).isoformat().encode(), 0o644)
            else:
                hold.unlink(missing_ok=True)
        except OSError as e:
            raise StoreError(f"cannot set legal hold on {digest} in {self.location}: {e}") from e

    async def legal_hold(self, digest: str) -> bool:
        self._require(digest)
        return self._lock_path(digest, "legal-hold").exists()

    async def set_retention(self, digest: str, until: datetime) -> None:
        """Keep the object at least until ``until``; an earlier date than the current one (or a
        date already past) leaves the retention unchanged."""
        until = normalize_retain_until(until)
        current = await self.retention(digest)
        if (current is not None and current >= until) or until <= datetime.now(UTC):
            return
        try:
            _atomic_write(
                self._lock_path(digest, "retain-until"), until.isoformat().encode(), 0o644
            )
        except OSError as e:
            raise StoreError(f"cannot set retention on {digest} in {self.location}: {e}") from e

    async def retention(self, digest: str) -> datetime | None:
        self._require(digest)
        path = self._lock_path(digest, "retain-until")
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise StoreError(f"cannot read retention of {digest} in {self.location}: {e}") from e
        try:
            return datetime.fromisoformat(text).astimezone(UTC)
        except ValueError as e:
            # Fail closed: an unreadable retention file must not unlock the object.
            raise StoreError(f"unreadable retention file {path}: {text[:64]!r}") from e

    def enforced_by_backend(self) -> bool:
        return False
