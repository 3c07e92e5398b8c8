"""MkDocs hook: the reference pages are generated from the code at every build, so they cannot
drift. A page holding ``<!-- generated: cli -->`` gets the command tree of the Typer app
(``cli.main.app``), one holding ``<!-- generated: http -->`` the routes of the API's OpenAPI
schema (``api.create_app().openapi()``). ``python docs/hooks/reference.py cli|http`` prints
either. A link from a page to a source file outside ``docs/`` is rendered as its path."""

from __future__ import annotations

import json
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CLI_MARKER = "<!-- generated: cli -->"
HTTP_MARKER = "<!-- generated: http -->"


#: a Markdown link whose target climbs out of docs/ (``[x](../examples/a.py)``)
_OUTSIDE_LINK = re.compile(r"\[([^\]]+)\]\(((?:\.\./)+[^)#\s]+)\)")


def _repository_paths(markdown: str, page_path: Path) -> str:
    """A link from a page to a file of the repository outside docs/ (source, examples) is
    rendered as that path: the site holds no copy of the source. A link whose target does not
    exist is left alone, so the strict build still fails on it."""

    def replace(match: re.Match[str]) -> str:
        target = (page_path.parent / match.group(2)).resolve()
        if not target.exists() or DOCS in target.parents:
            return match.group(0)
        relative = target.relative_to(ROOT).as_posix()
        text = match.group(1)
        return text if text.strip("`") == relative else f"{text} (`{relative}`)"

    return _OUTSIDE_LINK.sub(replace, markdown)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    markdown = _repository_paths(markdown, DOCS / page.file.src_path)
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if HTTP_MARKER in markdown:
        markdown = markdown.replace(HTTP_MARKER, http_reference())
    return markdown


# --- the command line -------------------------------------------------------------------------


def _commands() -> Iterator[tuple[list[str], Any, Any]]:
    """(path, command, context) for every command of ``replaybook``, depth first, in the order
    ``--help`` lists them."""
    import typer
    import typer.main

    sys.path.insert(0, str(ROOT))
    from cli.main import app

    root = typer.main.get_command(app)

    def walk(command: Any, path: list[str], parent: Any) -> Iterator[tuple[list[str], Any, Any]]:
        ctx = typer.Context(command, info_name=path[-1], parent=parent)
        yield path, command, ctx
        if _is_group(command):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(sub, [*path, name], ctx)

    yield from walk(root, ["replaybook"], None)


def _is_group(command: Any) -> bool:
    # Typer carries its own copy of click: recognised by behaviour, not by class
    return hasattr(command, "list_commands")


def _is_argument(param: Any) -> bool:
    return bool(param.param_type_name == "argument")


def command_paths() -> list[str]:
    """Every command's full name (``replaybook runs verify``)."""
    return [" ".join(path) for path, _, _ in _commands()]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _usage(path: list[str], command: Any) -> str:
    arguments = [
        p.name.upper() + ("" if p.required else "?") + ("…" if p.nargs == -1 else "")
        for p in command.params
        if _is_argument(p)
    ]
    tail = " COMMAND [ARGS]…" if _is_group(command) else ""
    return " ".join([*path, "[OPTIONS]", *arguments]) + tail


def _parameter_rows(command: Any, ctx: Any) -> list[str]:
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        if _is_argument(param):
            name = f"`{param.name.upper()}`"
            text = getattr(param, "help", None) or ""
            if param.required:
                text = f"{text} (required)".strip()
        else:
            record = param.get_help_record(ctx)
            if record is None:
                continue
            name, text = f"`{record[0]}`", record[1]
        rows.append(f"| {_cell(name)} | {_cell(text)} |")
    return rows


def cli_reference() -> str:
    """The whole command tree as Markdown: a heading per command, its help, usage and
    parameters."""
    out: list[str] = []
    for path, command, ctx in _commands():
        if len(path) == 1:
            continue
        level = "#" * min(len(path), 4)
        out.append(f"{level} {' '.join(path)}\n")
        if command.help:
            out.append(command.help.strip().replace("\b\n", "") + "\n")
        out.append(f"```text\n{_usage(path, command)}\n```\n")
        rows = _parameter_rows(command, ctx)
        if rows:
            out.append("| parameter | meaning |\n| --- | --- |\n" + "\n".join(rows) + "\n")
    return "\n".join(out)


# --- the HTTP API ------------------------------------------------------------------------------


def openapi_schema() -> dict[str, Any]:
    """The API's OpenAPI schema, from an application over throw-away settings (nothing is
    connected: the schema is built from the routes)."""
    sys.path.insert(0, str(ROOT))
    from api import create_app
    from api.auth import Role
    from api.config import ApiConfig
    from worker.settings import Settings

    with tempfile.TemporaryDirectory() as home:
        settings = Settings.from_env({"REPLAYBOOK_HOME": home})
        app = create_app(settings, ApiConfig(tokens={"docs": frozenset({Role.ADMIN})}))
        return app.openapi()


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if schema.get("type") == "array" and "items" in schema:
        return f"list of {_schema_name(schema['items'])}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_name(s) for s in schema[key])
    return str(schema.get("type", "object"))


def _request_body(operation: dict[str, Any]) -> str:
    body = operation.get("requestBody")
    if not body:
        return ""
    kinds = [
        f"`{media}` {_schema_name(content.get('schema', {}))}"
        for media, content in body.get("content", {}).items()
    ]
    return "**Body:** " + ", ".join(kinds) + "\n"


def _fields(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", ()))
    rows = []
    for name, spec in schema.get("properties", {}).items():
        kind = _schema_name(spec)
        if "enum" in spec:
            kind = " | ".join(f"`{v}`" for v in spec["enum"])
        text = spec.get("description", "")
        rows.append(
            f"| `{name}` | {_cell(kind)} | {'yes' if name in required else ''} | {_cell(text)} |"
        )
    return rows


def _referenced(roots: list[dict[str, Any]], components: dict[str, Any]) -> list[str]:
    """The component schemas ``roots`` refer to, directly or through one another, sorted."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str):
                name = ref.rsplit("/", 1)[-1]
                if name in components and name not in seen:
                    seen.add(name)
                    stack.append(components[name])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return sorted(seen)


def http_reference() -> str:
    """Every route of the schema (method, path, summary, parameters, body, answers), then the
    request bodies' fields."""
    schema = openapi_schema()
    out: list[str] = []
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            out.append(f"### {method.upper()} `{path}`\n")
            summary = operation.get("summary") or ""
            description = operation.get("description") or ""
            out.append(f"{summary}\n\n{description}\n".strip() + "\n")
            params = operation.get("parameters", [])
            if params:
                out.append("| parameter | in | required | meaning |\n| --- | --- | --- | --- |")
                out.extend(
                    f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else ''} | "
                    f"{_cell(p.get('description', ''))} |"
                    for p in params
                )
                out.append("")
            body = _request_body(operation)
            if body:
                out.append(body)
            out.append("| answer | meaning |\n| --- | --- |")
            out.extend(
                f"| `{code}` | {_cell(answer.get('description', ''))} |"
                for code, answer in sorted(operation.get("responses", {}).items())
            )
            out.append("")
    components = schema.get("components", {}).get("schemas", {})
    bodies = _referenced(
        [
            content.get("schema", {})
            for item in schema["paths"].values()
            for operation in item.values()
            for content in operation.get("requestBody", {}).get("content", {}).values()
        ],
        components,
    )
    if bodies:
        out.append("## Request bodies\n")
        out.append("Every schema a request body uses, and the schemas those use.\n")
        for name in bodies:
            component = components[name]
            out.append(f"### {name}\n")
            if component.get("description"):
                out.append(component["description"].strip() + "\n")
            if "enum" in component:
                out.append("One of " + ", ".join(f"`{v}`" for v in component["enum"]) + ".\n")
            rows = _fields(component)
            if rows:
                out.append("| field | type | required | meaning |\n| --- | --- | --- | --- |")
                out.extend(rows)
                out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "cli"
    if what == "openapi":
        print(json.dumps(openapi_schema(), indent=2))
    else:
        print(cli_reference() if what == "cli" else http_reference())
