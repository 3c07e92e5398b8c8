"""The generic tool-calling loop as a graph: ``start`` → ``model`` → ``tools`` → ``model`` … with
``user`` turns answered by the recorded ``user.reply`` capability. It replays any ingested or
imported chat-with-tools run: ``recorded`` mode answers the model from the recording (zero model
calls), ``exact``/``model-swap`` ask the configured OpenAI-compatible endpoint.

The run's own system prompt and tool catalogue come with its input (artifact references), so
one graph serves every imported agent: the prompt bundle and capability registry are per run.
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from models import PolicyDecision, PolicyDecisionRecord, SideEffectClass
from models.canonical import canonical_hash
from models.capability import Capability
from models.errors import UnknownCapabilityError
from models.ingest import TOOL_LOOP_GRAPH_ID, TOOL_LOOP_GRAPH_VERSION, USER_REPLY
from models.model_call import ChatMessage
from runtime.capabilities import CapabilityRegistry
from runtime.environment import AgentEnvironment
from runtime.graph import GraphDefinition, GraphRegistry, State, StepResult
from runtime.ports import ArtifactStore
from runtime.replay.gateways import reads_of
from runtime.tool_loop.context import record_context
from runtime.tool_loop.conversation import (
    MODEL,
    START,
    TOOLS,
    USER,
    LoopInput,
    LoopState,
    after_model,
    after_tools,
    after_user,
    as_sent,
    assistant_message,
    first_step,
    loop_outcome,
    record_model_response,
    record_prompt,
    record_sent_request,
    tool_message_content,
    tool_schemas,
    user_reply_request,
)

_CACHE: OrderedDict[str, bytes] = OrderedDict()
#: the most tokens one live model answer of a replayed tool loop may generate
LIVE_ANSWER_TOKENS = 256


async def _artifact(artifacts: ArtifactStore, ref: str) -> bytes:
    """Content-addressed, so a process-wide cache is always right; it saves a read per step."""
    if ref in _CACHE:
        _CACHE.move_to_end(ref)
        return _CACHE[ref]
    data = await artifacts.get(ref)
    _CACHE[ref] = data
    while len(_CACHE) > 256:
        _CACHE.popitem(last=False)
    return data


async def load_tools_json(artifacts: ArtifactStore, loop: LoopInput) -> list[dict[str, Any]]:
    return json.loads(await _artifact(artifacts, loop.tools_ref)) if loop.tools_ref else []


def run_registry(tools_json: list[dict[str, Any]]) -> CapabilityRegistry:
    """The run's tools as capabilities. Schemas are not enforced: the foreign agent's runtime
    ran its tools, and replay must answer exactly what it was asked, valid or not."""
    declared = [
        Capability(
            capability_id=t["name"],
            description=t.get("description") or "",
            side_effect_class=SideEffectClass(t.get("side_effect_class") or "WRITE"),
            # a miss may be answered live only where the catalog offers a READ provider for
            # the tool (imported tau-bench runs: the world's tools on a private copy)
            sandbox_live_allowed=(t.get("side_effect_class") or "WRITE") == "READ",
        )
        for t in tools_json
        if t["name"] != USER_REPLY
    ]
    user = Capability(
        capability_id=USER_REPLY,
        description="the recorded user's next message",
        side_effect_class=SideEffectClass.READ,
        stub={"content": None, "done": True},
    )
    return CapabilityRegistry("imported", [*declared, user])


async def source_registry(artifacts: ArtifactStore, agent_input: Any) -> CapabilityRegistry:
    """The capabilities of a recorded run of the loop (its own tool catalogue)."""
    return run_registry(await load_tools_json(artifacts, LoopInput.from_json(agent_input)))


def _ended(state: LoopState, ended_by: str | None, nxt: str | None) -> StepResult:
    # the loop ends (no next step) exactly when it says why
    return StepResult(
        state.to_json(), nxt, loop_outcome(ended_by) if ended_by is not None else None
    )


async def _start(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
    loop = LoopInput.from_json(agent_input)
    recorder = env.model.recorder
    system = (
        (await _artifact(recorder.artifacts, loop.system_prompt_ref)).decode()
        if loop.system_prompt_ref
        else None
    )
    current = LoopState(messages=list(loop.initial_messages))
    current.prompt_artifact_id = await record_prompt(recorder, system)
    return StepResult(current.to_json(), first_step(loop), None)


async def _model(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
    loop = LoopInput.from_json(agent_input)
    current = LoopState.from_json(state)
    gateway = env.model
    recorder = gateway.recorder
    system = (
        (await _artifact(recorder.artifacts, loop.system_prompt_ref)).decode()
        if loop.system_prompt_ref
        else None
    )
    tools = tool_schemas(await load_tools_json(recorder.artifacts, loop))
    request, snapshot = await record_context(
        recorder, current.model_calls + 1, system, current.messages, tools, gateway.model
    )
    if request.max_tokens is None:
        # a live answer is one turn of the conversation: a model that rambles is cut there
        # (a recorded replay answers from the recording and ignores it)
        request = request.model_copy(update={"max_tokens": LIVE_ANSWER_TOKENS})
    # the seed and token cap the call is sent with, so the recorded body is the one sent
    request = as_sent(gateway.provider, request)
    sent = await record_sent_request(recorder, gateway.provider, request)
    response = await gateway.provider.complete(request)
    await record_model_response(
        recorder,
        gateway.provider.profile,
        current.prompt_artifact_id,
        snapshot,
        response,
        sent,
        seed=request.seed,
    )
    current.model_calls += 1
    current.messages.append(assistant_message(response))
    if not response.tool_calls:
        current.answers += 1
    nxt, ended_by = after_model(loop, current, response)
    return _ended(current, ended_by, nxt)


async def _tools(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
    loop = LoopInput.from_json(agent_input)
    current = LoopState.from_json(state)
    gateway = _run_gateway(env, await load_tools_json(env.model.recorder.artifacts, loop))
    last = current.messages[-1]
    for call in last.tool_calls:
        try:
            result = await gateway.call(call.name, call.arguments, tool_call_id=call.id)
            content = tool_message_content(result.response)
        except UnknownCapabilityError:
            # a live model may ask for a tool the source agent did not have: it is told so
            content = f"Error: unknown tool {call.name}"
        current.messages.append(
            ChatMessage(role="tool", content=content, tool_call_id=call.id, name=call.name)
        )
    nxt, ended_by = after_tools(loop, current, [c.name for c in last.tool_calls])
    return _ended(current, ended_by, nxt)


async def _user(env: AgentEnvironment, state: State, agent_input: Any) -> StepResult:
    loop = LoopInput.from_json(agent_input)
    current = LoopState.from_json(state)
    gateway = _run_gateway(env, await load_tools_json(env.model.recorder.artifacts, loop))
    current.user_turns += 1
    result = await gateway.call(USER_REPLY, user_reply_request(current.user_turns))
    reply = result.response if isinstance(result.response, dict) else {}
    current.messages.append(ChatMessage(role="user", content=reply.get("content")))
    nxt, ended_by = after_user(loop, current, bool(reply.get("done", True)))
    return _ended(current, ended_by, nxt)


class _ForeignPolicy:
    """The imported agent's policy is its own and is not deployed here, so replay evaluates
    none (and records none, which would only be noise next to a source that has none): every
    write is let through to the gateway, which never executes it (rule 4)."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def decision_for(self, input_hash: str) -> PolicyDecisionRecord:
        return PolicyDecisionRecord(
            policy_id="imported-agent-policy",
            policy_version="not-deployed",
            input_hash=input_hash,
            sanitized_input=None,
            decision=PolicyDecision.ALLOW,
            reasons=("the imported agent's policy is not evaluated on replay",),
            run_id=self.recorder.run_id,
        )

    async def decide(self, policy_id: str, policy_input: Mapping[str, Any]) -> PolicyDecisionRecord:
        # never asked (``decision_for`` always answers); the same answer for the same input
        return self.decision_for(canonical_hash(self.recorder.hashing_view(dict(policy_input))))


def _run_gateway(env: AgentEnvironment, tools_json: list[dict[str, Any]]) -> Any:
    """The environment's tool gateway (recording or replay) bound to this run's tools; a
    shallow copy shares its recorder and positions, so fixtures are consumed in order."""
    gateway: Any = copy.copy(env.tools)
    gateway.registry = run_registry(tools_json)
    offered = getattr(gateway, "offered_reads", None)
    if offered is not None:  # a replay: the live READ providers of this run's tools
        gateway.read_providers = reads_of(gateway.registry, offered)
    gateway.policy = _ForeignPolicy(gateway.recorder)
    return gateway


TOOL_LOOP = GraphDefinition(
    graph_id=TOOL_LOOP_GRAPH_ID,
    version=TOOL_LOOP_GRAPH_VERSION,
    entry=START,
    steps={START: _start, MODEL: _model, TOOLS: _tools, USER: _user},
    description="generic tool-calling loop for ingested and imported chat-with-tools runs",
)
GRAPHS = GraphRegistry()
GRAPHS.register(TOOL_LOOP)
