"""Candidates for any agent (issue 32, item 2): a new compiled system prompt and a changed tool
catalogue for a tool-loop run (ingested or imported), read from files or API fields, checked,
and stored as artifacts. Only their digests travel on (in replay plans, counterfactuals and
gate candidates, through Temporal); the texts stay in the artifact store.

``--system-prompt-file FILE`` / ``candidateSystemPrompt``: the prompt's text (UTF-8, not empty).
``--tools-file FILE`` / ``candidateTools``: a JSON list of tools as the run's own catalogue
records them (``{"name", "description", "parameters", "side_effect_class"}``) or as OpenAI
function schemas (``{"type": "function", "function": {...}}``); a tool that says neither READ
nor WRITE (nor ``read_only_hint``) is WRITE, so replay never calls it live.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from models.canonical import canonicalize
from models.errors import InvalidInputError
from models.ingest import IngestTool

if TYPE_CHECKING:
    from runtime.ports import ArtifactStore

#: the largest candidate text (a compiled system prompt of a real agent is tens of kB)
MAX_CANDIDATE_BYTES = 1024 * 1024


def read_candidate_file(path: Path, field: str) -> str:
    """The file's text: readable, UTF-8, not empty, at most ``MAX_CANDIDATE_BYTES``."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInputError(
            f"{field} {path}: cannot read: {exc.strerror}", field=field
        ) from None
    if len(data) > MAX_CANDIDATE_BYTES:
        raise InvalidInputError(
            f"{field} {path}: {len(data)} bytes, more than {MAX_CANDIDATE_BYTES}", field=field
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{field} {path}: not UTF-8 at byte {exc.start}", field=field
        ) from None
    if not text.strip():
        raise InvalidInputError(f"{field} {path}: must not be empty", field=field)
    return text


def system_prompt_bytes(text: str, field: str) -> bytes:
    if not text.strip():
        raise InvalidInputError(f"{field} must not be empty", field=field)
    data = text.encode("utf-8")
    if len(data) > MAX_CANDIDATE_BYTES:
        raise InvalidInputError(f"{field}: more than {MAX_CANDIDATE_BYTES} bytes", field=field)
    return data


def _tool(entry: Any, where: str, field: str) -> dict[str, Any]:
    if isinstance(entry, dict) and entry.get("type") == "function" and "function" in entry:
        entry = entry["function"]
    try:
        tool = IngestTool.model_validate(entry)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"]) or "tool"
        raise InvalidInputError(f"{field} {where}.{at}: {first['msg']}", field=field) from None
    if tool.side_effect_class is not None:
        effect = tool.side_effect_class.value
    else:
        effect = "READ" if tool.read_only_hint and not tool.destructive_hint else "WRITE"
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "side_effect_class": effect,
    }


def tools_catalog_bytes(text: str, field: str) -> bytes:
    """The tool catalogue as the tool loop reads it (canonical JSON), each tool checked."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            f"{field}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            field=field,
        ) from None
    if isinstance(data, dict) and isinstance(data.get("tools"), list):
        data = data["tools"]
    if not isinstance(data, list):
        raise InvalidInputError(f"{field}: expected a JSON list of tools", field=field)
    tools = [_tool(entry, f"[{i}]", field) for i, entry in enumerate(data)]
    names = [t["name"] for t in tools]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InvalidInputError(f"{field}: tool {dup!r} is listed twice", field=field)
    return canonicalize(tools)


async def store_candidates(
    artifacts: ArtifactStore,
    *,
    system_prompt: str | None = None,
    tools: str | None = None,
    fields: tuple[str, str] = ("--system-prompt-file", "--tools-file"),
) -> dict[str, str]:
    """``{"system_prompt": digest, "tools": digest}`` for the candidates given (texts), each
    checked and stored as an artifact; ``InvalidInputError`` naming the field otherwise."""
    out: dict[str, str] = {}
    if system_prompt is not None:
        out["system_prompt"] = await artifacts.put(system_prompt_bytes(system_prompt, fields[0]))
    if tools is not None:
        out["tools"] = await artifacts.put(tools_catalog_bytes(tools, fields[1]))
    return out


def read_candidates(system_prompt_file: Path | None, tools_file: Path | None) -> dict[str, str]:
    """The candidate files' texts (``system_prompt``, ``tools``), read and checked (CLI)."""
    out = {}
    if system_prompt_file is not None:
        out["system_prompt"] = read_candidate_file(system_prompt_file, "--system-prompt-file")
    if tools_file is not None:
        text = read_candidate_file(tools_file, "--tools-file")
        tools_catalog_bytes(text, "--tools-file")  # refused before anything is stored
        out["tools"] = text
    return out


#: the candidate kinds that only a tool-loop run (an ingested or imported agent) can take
TOOL_LOOP_KINDS = ("system_prompt", "tools")


def tool_loop_problem(graph_id: str, kind: str) -> str | None:
    """Why a run of ``graph_id`` cannot take a ``kind`` candidate (None: it can): a system
    prompt or tool catalogue swaps into a tool-loop run; an agent built on this runtime swaps
    its prompt bundle (``prompt=V``)."""
    from models.ingest import TOOL_LOOP_GRAPH_ID

    if kind in TOOL_LOOP_KINDS and graph_id != TOOL_LOOP_GRAPH_ID:
        what = "system prompt" if kind == "system_prompt" else "tool catalogue"
        return (
            f"a candidate {what} applies to tool-loop runs (ingested or imported agents); "
            f"{graph_id} swaps its prompt bundle (prompt=V)"
        )
    return None
