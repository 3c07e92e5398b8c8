"""The domain databases of tau-bench as a private, copy-on-write world, and their hash.

A replay needs a fresh copy of the database per run. Deep-copying (and re-hashing) the whole
airline database (~5 MB of JSON) for each of ~200 runs would dominate the replay, so a
``World`` shares the loaded base tables read-only and deep-copies a record the first time a
tool changes it. Tools must therefore read with ``get``/``records`` and change only what
``edit``/``put`` hand them.

The hash is tau-bench's ``consistent_hash``: sha256 of ``str()`` of the database turned into
nested tuples (dicts become tuples of (key, value) sorted by key, lists become tuples), the
database being ``{file name without .json: table}``. That string is kept per table for the
base, with each record's position, so hashing a world converts only the records it changed.
"""

from __future__ import annotations

import bisect
import copy
import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from models.errors import InvalidInputError

__all__ = ["DB_TABLES", "DomainData", "World", "consistent_hash", "load_domain", "to_hashable"]

#: the JSON files (tables) of each domain's database
DB_TABLES: dict[str, tuple[str, ...]] = {
    "airline": ("flights", "reservations", "users"),
    "retail": ("orders", "products", "users"),
}


def to_hashable(value: Any) -> Any:
    """tau-bench's hashable form: dicts as key-sorted (key, value) tuples, lists as tuples."""
    if isinstance(value, dict):
        return tuple(sorted((k, to_hashable(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(to_hashable(v) for v in value)
    return value


def consistent_hash(db: dict[str, Any]) -> str:
    """The reference (slow) hash of a whole database; ``World.hash`` must agree with it."""
    return hashlib.sha256(str(to_hashable(db)).encode()).hexdigest()


def _pair_repr(key: str, record: Any) -> str:
    return repr((key, to_hashable(record)))


def _tuple_repr_bytes(parts: list[bytes]) -> bytes:
    """``repr`` of a tuple whose items' reprs are ``parts`` (a 1-tuple keeps its comma)."""
    if len(parts) == 1:
        return b"(" + parts[0] + b",)"
    return b"(" + b", ".join(parts) + b")"


@dataclass(frozen=True)
class DomainData:
    """One domain's database at one benchmark version, loaded once and never changed."""

    domain: str
    version: str
    tables: dict[str, dict[str, Any]]
    #: table -> repr of the whole table's hashable form, UTF-8 (its piece of the hashed text)
    table_reprs: dict[str, bytes] = field(repr=False)
    #: table -> keys in sorted order, and key -> (start, end) of its record in table_reprs
    sorted_keys: dict[str, list[str]] = field(repr=False)
    spans: dict[str, dict[str, tuple[int, int]]] = field(repr=False)

    @cached_property
    def initial_hash(self) -> str:
        return World(self).hash()


def _indexed_repr(rows: dict[str, Any]) -> tuple[bytes, list[str], dict[str, tuple[int, int]]]:
    keys = sorted(rows)
    parts = [_pair_repr(k, rows[k]).encode() for k in keys]
    spans, offset = {}, 1  # after the opening parenthesis
    for key, part in zip(keys, parts, strict=True):
        spans[key] = (offset, offset + len(part))
        offset += len(part) + 2  # ", "
    return _tuple_repr_bytes(parts), keys, spans


def load_domain(env_dir: str | Path, version: str, domain: str) -> DomainData:
    """``env-data/<version>/<domain>/*.json`` as a DomainData."""
    if domain not in DB_TABLES:
        raise InvalidInputError(
            f"unknown tau-bench domain {domain!r}; expected one of {tuple(DB_TABLES)}"
        )
    folder = Path(env_dir) / version / domain
    tables: dict[str, dict[str, Any]] = {}
    for name in DB_TABLES[domain]:
        path = folder / f"{name}.json"
        try:
            table = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidInputError(
                f"cannot read the {domain} database {path}: {exc.strerror}"
            ) from None
        except ValueError as exc:
            raise InvalidInputError(f"{path} is not JSON: {exc}") from None
        if not isinstance(table, dict):
            raise InvalidInputError(f"{path}: expected a JSON object keyed by id")
        tables[name] = table
    indexed = {t: _indexed_repr(rows) for t, rows in tables.items()}
    return DomainData(
        domain,
        version,
        tables,
        table_reprs={t: i[0] for t, i in indexed.items()},
        sorted_keys={t: i[1] for t, i in indexed.items()},
        spans={t: i[2] for t, i in indexed.items()},
    )


class World:
    """A private copy of a domain database: base records shared, changed records copied."""

    def __init__(self, base: DomainData) -> None:
        self.base = base
        self._changed: dict[str, dict[str, Any]] = {t: {} for t in base.tables}

    def _table(self, table: str) -> dict[str, Any]:
        if table not in self.base.tables:
            raise KeyError(table)
        return self.base.tables[table]

    def get(self, table: str, key: Any) -> Any | None:
        """A record to READ (may be the shared base record: never change it)."""
        if not isinstance(key, str):
            return None
        changed = self._changed[table]
        if key in changed:
            return changed[key]
        return self._table(table).get(key)

    def require(self, table: str, key: Any) -> Any:
        """A record to READ that must exist: ``KeyError(key)`` otherwise, as a lookup in the
        benchmark's dict would raise (its tools answer ``Error: 'key'`` then)."""
        record = self.get(table, key)
        if record is None:
            raise KeyError(key)
        return record

    def edit(self, table: str, key: str) -> Any:
        """A record to change: this world's own copy (made on first use)."""
        changed = self._changed[table]
        if key not in changed:
            changed[key] = copy.deepcopy(self._table(table)[key])
        return changed[key]

    def put(self, table: str, key: str, record: Any) -> None:
        """Add or replace a record; the world keeps its own copy."""
        self._changed[table][key] = copy.deepcopy(record)

    def records(self, table: str) -> list[Any]:
        """Every record of a table, in the database's order (new records last)."""
        return [record for _, record in self.items(table)]

    def items(self, table: str) -> list[tuple[str, Any]]:
        """(key, record) of every record of a table, in the database's order."""
        base, changed = self._table(table), self._changed[table]
        rows = [(k, changed.get(k, v)) for k, v in base.items()]
        rows += [(k, v) for k, v in changed.items() if k not in base]
        return rows

    @property
    def changed_keys(self) -> dict[str, list[str]]:
        return {t: sorted(rows) for t, rows in self._changed.items() if rows}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The whole database as plain dicts (for the reference hash and for debugging)."""
        out = {}
        for t, base in self.base.tables.items():
            table = dict(base)
            table.update(self._changed[t])
            out[t] = table
        return out

    def _table_repr(self, table: str) -> bytes:
        """The base table's repr with the changed records' pieces spliced in (new keys at
        their sorted place), so only changed records are converted."""
        text, changed = self.base.table_reprs[table], self._changed[table]
        if not changed:
            return text
        keys, spans = self.base.sorted_keys[table], self.base.spans[table]
        if len(keys) < 2:  # a 0- or 1-tuple is formatted differently: compose it whole
            rows = {**self.base.tables[table], **changed}
            return _tuple_repr_bytes([_pair_repr(k, rows[k]).encode() for k in sorted(rows)])
        edits = []
        for key, record in changed.items():
            piece = _pair_repr(key, record).encode()
            if key in spans:
                edits.append((*spans[key], key, piece))
                continue
            i = bisect.bisect_left(keys, key)
            if i < len(keys):
                at = spans[keys[i]][0]
                edits.append((at, at, key, piece + b", "))
            else:
                at = len(text) - 1  # before the closing parenthesis
                edits.append((at, at, key, b", " + piece))
        out: list[bytes] = []
        position = 0
        for start, end, _, piece in sorted(edits):
            out += [text[position:start], piece]
            position = end
        out.append(text[position:])
        return b"".join(out)

    def hash(self) -> str:
        """``consistent_hash`` of the current database, fed to sha256 piece by piece (the
        tables are never concatenated); an untouched world has the base's hash."""
        if "initial_hash" in vars(self.base) and not any(self._changed.values()):
            return self.base.initial_hash
        names = sorted(self.base.tables)
        digest = hashlib.sha256(b"(")
        for i, name in enumerate(names):
            digest.update(b", (" if i else b"(")
            digest.update(f"{name!r}, ".encode())
            digest.update(self._table_repr(name))
            digest.update(b")")
        digest.update(b",)" if len(names) == 1 else b")")
        return digest.hexdigest()
