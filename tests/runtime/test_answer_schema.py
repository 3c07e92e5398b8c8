"""The answer schema of ``tool_calling: "prompt"`` (``prompt_tools.answer_schema``): one
alternative per tool, each with that tool's own argument schema, so the grammar llama.cpp
derives from it only lets a model write arguments that fit the tool it names. Pure: the schema
is checked with ``jsonschema`` and turned into a grammar by llama-cpp-python's own converter
(the one its server uses; a schema it cannot convert is silently replaced by plain JSON)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from models.model_call import ToolSchema
from runtime.providers.prompt_tools import answer_schema

GET_USER = ToolSchema(
    name="get_user_details",
    description="Get the details of a user.",
    parameters={
        "type": "object",
        "properties": {"user_id": {"type": "string"}},
        "required": ["user_id"],
    },
)
BAGGAGES = ToolSchema(
    name="update_reservation_baggages",
    description="Update the baggage information of a reservation.",
    parameters={
        "type": "object",
        "properties": {
            "reservation_id": {"type": "string"},
            "total_baggages": {"type": "integer"},
            "cabin": {"type": "string", "enum": ["economy", "business"]},
        },
        "required": ["reservation_id", "total_baggages"],
    },
)
#: pydantic-style parameters: a local definition referred to by ``$ref``
BOOK = ToolSchema(
    name="book",
    description="Book.",
    parameters={
        "type": "object",
        "$defs": {
            "Passenger": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            }
        },
        "properties": {"passengers": {"type": "array", "items": {"$ref": "#/$defs/Passenger"}}},
        "required": ["passengers"],
    },
)
NO_ARGUMENTS = ToolSchema(
    name="list_all_airports",
    description="List all airports.",
    parameters={"type": "object", "properties": {}, "required": []},
)
#: a reference outside the tool's own schema: its arguments are left any object
REMOTE = ToolSchema(
    name="remote",
    description="Refers elsewhere.",
    parameters={"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}},
)
TOOLS = (GET_USER, BAGGAGES, BOOK, NO_ARGUMENTS, REMOTE)


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": arguments}}


def test_each_tool_is_called_with_its_own_arguments() -> None:
    schema = answer_schema(TOOLS)["schema"]
    for answer in (
        _call("get_user_details", {"user_id": "mia_li_3668"}),
        _call("update_reservation_baggages", {"reservation_id": "Z", "total_baggages": 2}),
        _call(
            "update_reservation_baggages",
            {"reservation_id": "Z", "total_baggages": 1, "cabin": "business"},
        ),
        _call("book", {"passengers": [{"name": "Mia"}]}),
        _call("list_all_airports", {}),
        _call("remote", {"x": [1, 2]}),
        {"content": "How can I help?"},
    ):
        jsonschema.validate(answer, schema)
    for wrong in (
        _call("get_user_details", {}),  # a required argument missing
        _call("get_user_details", {"reservation_id": "Z"}),  # another tool's argument
        _call("get_user_details", {"user_id": "u", "extra": 1}),  # an undeclared argument
        _call("update_reservation_baggages", {"reservation_id": "Z", "total_baggages": "2"}),
        _call(
            "update_reservation_baggages",
            {"reservation_id": "Z", "total_baggages": 1, "cabin": "first"},
        ),
        _call("book", {"passengers": [{}]}),  # the referred definition applies
        _call("list_all_airports", {"code": "SFO"}),
        # the JSON parameter schema copied as the arguments (what gemma3-270m wrote before)
        _call("get_user_details", GET_USER.parameters),
        _call("book_flight", {}),  # not an offered tool
        {"content": "text", **_call("list_all_airports", {})},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


def test_definitions_are_moved_under_names_of_their_own() -> None:
    other = BOOK.model_copy(update={"name": "book_again"})
    schema = answer_schema((BOOK, other))["schema"]
    assert sorted(schema["$defs"]) == ["t0_Passenger", "t1_Passenger"]
    refs = [
        alt["properties"]["tool_call"]["properties"]["arguments"]["properties"]["passengers"][
            "items"
        ]["$ref"]
        for alt in schema["anyOf"][:2]
    ]
    assert refs == ["#/$defs/t0_Passenger", "#/$defs/t1_Passenger"]
    # the tools' own schemas are left as they were
    params: Any = BOOK.parameters
    assert params["properties"]["passengers"]["items"] == {"$ref": "#/$defs/Passenger"}


def test_llama_cpp_turns_the_schema_into_a_grammar_with_each_tools_arguments() -> None:
    grammar_module = pytest.importorskip("llama_cpp.llama_grammar")
    sent = answer_schema(TOOLS)
    assert sent["type"] == "json_object" and sent["json_schema"]["schema"] == sent["schema"]
    # what the server does with ``response_format.schema`` (minus its silent fallback)
    grammar = grammar_module.json_schema_to_gbnf(json.dumps(sent["schema"]))
    for literal in (
        r'"\"get_user_details\""',
        r'"\"user_id\""',
        r'"\"total_baggages\""',
        r'"\"economy\""',
        r'"\"passengers\""',
        r'"\"content\""',
    ):
        assert literal in grammar, literal
    # the parameter schemas' keywords are not literals the model could write
    assert r'"\"required\""' not in grammar and r'"\"properties\""' not in grammar
