"""A model request's canonical bytes assembled from its messages' bytes (``ModelRequest.
canonical_bytes``) are exactly the canonical form of the whole request: a context snapshot's
content hash must not depend on which path computed it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from models.canonical import canonicalize
from models.model_call import (
    ChatMessage,
    ModelRequest,
    ToolCallRequest,
    ToolSchema,
    canonical_tools,
)

# text that could confuse a splice: the markers themselves, quotes, escapes, non-ASCII
_TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(['"messages":[]', '"tools":[]', '\\"', "é", "e\u0301", "\U0001f600", ""]),
)
# keys that stay distinct under NFC (keys equal after it are refused by the canonical form)
_KEY = st.one_of(
    st.text(st.characters(codec="ascii"), max_size=10),
    st.sampled_from(['"messages":[]', '"tools":[]', '\\"', "é", "\U0001f600"]),
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53 - 1), 2**53 - 1) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEY, inner, max_size=3),
    max_leaves=8,
)
_CALL = st.builds(
    ToolCallRequest, id=_TEXT, name=_TEXT, arguments=st.dictionaries(_KEY, _JSON, max_size=3)
)
_MESSAGE = st.builds(
    ChatMessage,
    role=st.sampled_from(["system", "user", "assistant", "tool"]),
    content=st.none() | _TEXT,
    tool_calls=st.lists(_CALL, max_size=2).map(tuple),
    tool_call_id=st.none() | _TEXT,
    name=st.none() | _TEXT,
)
_TOOL = st.builds(
    ToolSchema,
    name=_TEXT,
    description=_TEXT,
    parameters=st.dictionaries(_KEY, _JSON, max_size=3),
)
_REQUEST = st.builds(
    ModelRequest,
    model=_TEXT,
    messages=st.lists(_MESSAGE, max_size=4).map(tuple),
    tools=st.lists(_TOOL, max_size=2).map(tuple),
    temperature=st.none() | st.floats(0, 2, allow_nan=False),
    max_tokens=st.none() | st.integers(1, 4096),
    seed=st.none() | st.integers(0, 2**31),
)


@settings(max_examples=300, deadline=None)
@given(_REQUEST)
def test_assembled_bytes_equal_the_whole_requests_canonical_form(request: ModelRequest) -> None:
    messages = [canonicalize(m.model_dump(mode="json")) for m in request.messages]
    assembled = request.canonical_bytes(messages, canonical_tools(request.tools))
    assert assembled == canonicalize(request.model_dump(mode="json"))


def test_a_message_whose_bytes_differ_changes_the_assembled_form() -> None:
    request = ModelRequest(model="m", messages=(ChatMessage(role="user", content="a"),))
    honest = request.canonical_bytes(
        [canonicalize(request.messages[0].model_dump(mode="json"))], canonical_tools(())
    )
    other = request.canonical_bytes(
        [canonicalize(ChatMessage(role="user", content="b").model_dump(mode="json"))],
        canonical_tools(()),
    )
    assert honest != other
    assert b'"messages":[{' in honest and b'"tools":[]' in honest
