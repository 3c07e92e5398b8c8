"""A team's own read-only tools, answering a replay's fixture misses (issue 32, item 3).

The contract of a tools module (``docs/your-tools.md``)::

    def order_status(arguments, context):          # sync or async
        # context.logical_time: the replayed run's frozen clock (never today's)
        # context.run_id: the replay's run; context.tool: this tool's name
        return {"order_id": arguments["order_id"], "status": "shipped"}   # a JSON object

    REPLAYBOOK_TOOLS = {
        "order_status": {"effect": "READ", "call": order_status},
        "cancel_order": {"effect": "WRITE", "call": cancel_order},  # listed, never called
    }

A module is named by ``--tools-module package.module[:ATTRIBUTE]`` (API ``toolsModule``) or by
the name a distribution registers it under in the ``replaybook.tools`` entry-point group. Only
tools declared ``READ`` are ever called, and only on a fixture miss under ``sandbox-live``,
inside the sandbox (the replay step's bubblewrap child), with the run's logical time; a tool
the run's tool catalogue (or the candidate ``--tools-file``) says is WRITE is never called
either. The module is pinned by a hash of its source files: a worker that finds other files
under the name refuses to call it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from models.errors import FixtureMissError, InvalidInputError
from models.tools_module import ENTRY_POINT_GROUP, ToolsModulePin
from runtime.tools import ToolCallContext, ToolProvider

_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*(:[A-Za-z_][\w]*)?$")
EFFECTS = ("READ", "WRITE")

#: the gate a call passes before the team's code runs: (tool, arguments, context) → the
#: logical time to call it with (in the sandbox: the worker's guard decides it)
LiveReadGate = Callable[[str, dict[str, Any], ToolCallContext], Awaitable[datetime]]


@dataclass(frozen=True)
class TeamToolContext:
    """What a team's tool is called with besides its arguments."""

    run_id: str
    #: the replayed run's logical time (rule 6): a time the source recorded, never today's
    logical_time: datetime
    tool: str


@dataclass(frozen=True)
class TeamTools:
    pin: ToolsModulePin
    #: READ tools only: a WRITE entry is never kept where it could be called
    reads: Mapping[str, Callable[..., Any]]
    writes: tuple[str, ...]

    def providers(self, gate: LiveReadGate) -> dict[str, ToolProvider]:
        """A ``ToolProvider`` per READ tool: the gate first, then the team's code."""
        return {name: _provider(self.pin, name, fn, gate) for name, fn in self.reads.items()}


def _provider(
    pin: ToolsModulePin, name: str, fn: Callable[..., Any], gate: LiveReadGate
) -> ToolProvider:
    async def provider(arguments: dict[str, Any], context: ToolCallContext) -> dict[str, Any]:
        at = await gate(name, arguments, context)
        try:
            answer = fn(dict(arguments), TeamToolContext(context.run_id, at, name))
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception as exc:  # the team's code failed: the miss stays unanswered
            raise FixtureMissError(
                f"tool {name!r} of {pin.module} raised {type(exc).__name__}: {exc} (the fixture "
                "miss it was to answer stays unanswered)",
                capability_id=name,
                retryable=False,
            ) from None
        if not isinstance(answer, dict):
            raise InvalidInputError(
                f"tool {name!r} of {pin.module} returned {type(answer).__name__}, not a JSON "
                "object (dict)"
            )
        try:
            json.dumps(answer)
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                f"tool {name!r} of {pin.module} returned what is not JSON: {exc}"
            ) from None
        return answer

    provider.answered_by = pin.label()  # type: ignore[attr-defined]  # recorded with the miss
    return provider


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def resolve_name(name: str, field: str) -> tuple[str, str | None]:
    """``(module[:attribute], entry-point name or None)`` for what the user typed: the name of
    a ``replaybook.tools`` entry point, else a module path."""
    registered = _entry_points()
    if name in registered:
        return registered[name].replace(" ", ""), name
    if not _NAME.fullmatch(name):
        known = ", ".join(sorted(registered)) or "none registered"
        raise InvalidInputError(
            f"{field} {name!r}: neither a module path (package.module[:ATTRIBUTE]) nor a "
            f"{ENTRY_POINT_GROUP} entry point ({known})",
            field=field,
        )
    return name, None


def source_files(module_name: str) -> list[tuple[str, Path]]:
    """The module's source files by relative path, found without importing it (a package:
    every ``.py`` file under it)."""
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        raise InvalidInputError(f"cannot import {module_name}: {exc}") from None
    if spec is None or spec.origin is None:
        raise InvalidInputError(f"cannot import {module_name}: no such module")
    if spec.submodule_search_locations:
        files = []
        for location in spec.submodule_search_locations:
            root = Path(location)
            files += [(str(p.relative_to(root)), p) for p in root.rglob("*.py")]
        return sorted(files)
    origin = Path(spec.origin)
    return [(origin.name, origin)]


def source_digest(module_name: str) -> str:
    """SHA-256 over the module's source files (``sha256:…``): each relative path and its
    bytes' hash, in path order."""
    digest = hashlib.sha256()
    for relative, path in source_files(module_name):
        data = path.read_bytes()
        digest.update(f"{relative}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return "sha256:" + digest.hexdigest()


def _distribution(module_name: str) -> str | None:
    top = module_name.split(".")[0]
    names = importlib.metadata.packages_distributions().get(top) or []
    if not names:
        return None
    return f"{names[0]} {importlib.metadata.version(names[0])}"


def _declared(module: str, value: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    if not isinstance(value, Mapping) or not value:
        raise InvalidInputError(
            f"{where}: {module} must map tool names to {{'effect': 'READ' | 'WRITE', 'call': "
            f"callable}}, not {type(value).__name__}"
        )
    reads: dict[str, Any] = {}
    writes: list[str] = []
    for name, entry in value.items():
        if not isinstance(entry, Mapping) or not callable(entry.get("call")):
            raise InvalidInputError(
                f"{where}: tool {name!r} of {module} must be {{'effect': 'READ' | 'WRITE', "
                "'call': callable}"
            )
        effect = entry.get("effect")
        if effect not in EFFECTS:
            raise InvalidInputError(
                f"{where}: tool {name!r} of {module} declares effect {effect!r} (READ or WRITE)"
            )
        if effect == "READ":
            reads[str(name)] = entry["call"]
        else:
            writes.append(str(name))
    if not reads:
        raise InvalidInputError(
            f"{where}: {module} declares no READ tool (WRITE tools are never called in a replay)"
        )
    return reads, writes


#: loaded modules by pin digest (a process imports a module once)
_LOADED: dict[tuple[str, str], TeamTools] = {}


def _imported(target: str, where: str, field: str | None) -> tuple[str, dict[str, Any], list[str]]:
    """``target`` (``module[:attribute]``) hashed and imported, its mapping checked: its source
    digest, READ tools and WRITE tool names; ``InvalidInputError`` starting with ``where``."""
    module_name, _, attribute = target.partition(":")
    try:
        digest = source_digest(module_name)
        module = importlib.import_module(module_name)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{where}: {exc}", field=field) from None
    except Exception as exc:  # the team's module failed to import: say how
        raise InvalidInputError(
            f"{where}: cannot import {module_name}: {type(exc).__name__}: {exc}", field=field
        ) from None
    attribute = attribute or "REPLAYBOOK_TOOLS"
    if not hasattr(module, attribute):
        raise InvalidInputError(
            f"{where}: {module_name} defines no {attribute} (a mapping of tool names to "
            "{'effect': 'READ' | 'WRITE', 'call': callable})",
            field=field,
        )
    try:
        reads, writes = _declared(target, getattr(module, attribute), where)
    except InvalidInputError as exc:
        raise InvalidInputError(str(exc), field=field) from None
    return digest, reads, writes


def load_team_tools(name: str, field: str = "--tools-module") -> TeamTools:
    """Import the module the user named (module path or entry-point name), check its contract
    and pin it; ``InvalidInputError`` naming ``field`` and the problem otherwise."""
    target, entry_point = resolve_name(name, field)
    digest, reads, writes = _imported(target, f"{field} {name}", field)
    pin = ToolsModulePin(
        module=target,
        digest=digest,
        distribution=_distribution(target.partition(":")[0]),
        entry_point=entry_point,
        read_tools=tuple(sorted(reads)),
    )
    tools = TeamTools(pin, reads, tuple(sorted(writes)))
    _LOADED[(pin.module, pin.digest)] = tools
    return tools


def pinned_team_tools(pin: ToolsModulePin) -> TeamTools:
    """The module ``pin`` names, as it was pinned: imported here (in a sandboxed step: inside
    the sandbox), refused when its source files changed since; only the READ tools the pin
    lists are kept."""
    loaded = _LOADED.get((pin.module, pin.digest))
    if loaded is not None:
        return loaded
    found = source_digest(pin.module_name)
    if found != pin.digest:
        raise InvalidInputError(
            f"tools module {pin.module} changed since the replay was planned (pinned "
            f"{pin.digest}, found {found})"
        )
    digest, reads, writes = _imported(pin.module, f"tools module {pin.module}", None)
    if digest != pin.digest:  # changed between the two reads
        raise InvalidInputError(f"tools module {pin.module} changed while it was loaded")
    kept = {name: call for name, call in reads.items() if name in pin.read_tools}
    tools = TeamTools(pin, kept, tuple(sorted(writes)))
    _LOADED[(pin.module, pin.digest)] = tools
    return tools


def pin_problem(pin: ToolsModulePin) -> str | None:
    """Why this process cannot call the pinned module (None: it can), read from its files
    without importing it: not found, or other files than the pinned ones."""
    try:
        found = source_digest(pin.module_name)
    except InvalidInputError as exc:
        return f"tools module {pin.module}: {exc}"
    if found != pin.digest:
        return (
            f"tools module {pin.module} on this worker is not the pinned one (pinned "
            f"{pin.digest}, found {found})"
        )
    return None
