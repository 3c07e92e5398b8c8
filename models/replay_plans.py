"""How a replay request becomes a ``ReplayPlan``: the one place where a plan is built and
checked. The CLI, the HTTP API, the regression gate and the incident workflow all call
``build_replay_plan`` (the last two through ``plan_for_candidates``).

Pure: ids and sampling seeds are given by the caller (the application layer draws them; a
workflow derives them from its own inputs), so a workflow can build plans deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from models.enums import FixtureMissPolicy, ReplayMode
from models.errors import InvalidInputError
from models.replay import ReplayBudget
from models.replay_flow import DEFAULT_MAX_LOOP_CALLS, ReplayPlan
from models.tools_module import ToolsModulePin

#: what a counterfactual or a regression candidate may swap (``system_prompt`` and ``tools``:
#: a tool-loop run's compiled system prompt and tool catalogue, by artifact digest)
CANDIDATE_KINDS = ("prompt", "model", "policy", "retriever", "system_prompt", "tools")
#: the candidates that change what the model is sent, as a prompt swap does
PROMPT_CANDIDATES = ("prompt", "system_prompt", "tools")
MAX_REPEAT = 1000
#: the modes that may start from a recorded step's checkpoint
FORKING_MODES = (ReplayMode.FORK_FROM_STEP, ReplayMode.PROMPT_SWAP, ReplayMode.MODEL_SWAP)


@dataclass(frozen=True)
class PlanFields:
    """How a caller names the plan's inputs, so that an error names the field it typed
    (CLI flags, API body fields or the plan's own field names)."""

    mode: str = "mode"
    prompt: str = "prompt_version"
    model: str = "model_name"
    from_step: str = "from_step"
    repeat: str = "repeat"
    candidate: str = "candidate"
    max_loop_calls: str = "max_loop_calls"
    policy: str = "policy_version"
    retriever: str = "retriever_version"
    substitute_model: str = "substitute_model"
    deny_approvals: str = "deny_approvals"
    replay_id: str = "replay_id"
    system_prompt: str = "candidate_system_prompt"
    tools: str = "candidate_tools"
    tools_module: str = "tools_module"
    #: how the caller names the ``SANDBOX_LIVE`` miss policy (``--on-fixture-miss sandbox-live``)
    sandbox_live: str = "miss_policy SANDBOX_LIVE"
    mode_names: Mapping[ReplayMode, str] = field(
        default_factory=lambda: {mode: mode.value for mode in ReplayMode}
    )


PLAN_FIELDS = PlanFields()


def _invalid(name: str, message: str) -> InvalidInputError:
    return InvalidInputError(message, field=name)


def _check_mode_inputs(
    f: PlanFields,
    mode: ReplayMode,
    prompt: str | None,
    model: str | None,
    from_step: str | None,
    swapped: tuple[str | None, str | None] = (None, None),
) -> None:
    named = f.mode_names[mode]
    system_prompt, tools = swapped
    if mode is ReplayMode.PROMPT_SWAP and not (prompt or system_prompt or tools):
        raise _invalid(
            f.prompt, f"{f.mode} {named} needs {f.prompt} (or {f.system_prompt} or {f.tools})"
        )
    if mode is ReplayMode.RECORDED and (system_prompt or tools):
        raise _invalid(
            f.system_prompt if system_prompt else f.tools,
            f"{f.mode} {named} replays the recorded model answers: "
            f"{f.system_prompt}/{f.tools} need a live mode",
        )
    if mode is ReplayMode.MODEL_SWAP and not model:
        raise _invalid(f.model, f"{f.mode} {named} needs {f.model}")
    if mode is ReplayMode.FORK_FROM_STEP and not from_step:
        raise _invalid(f.from_step, f"{f.mode} {named} needs {f.from_step}")
    if from_step and mode not in FORKING_MODES:
        # a prompt or model swap from a step is a fork with the candidate swapped in (the
        # seed's own request: PROMPT_SWAP with startFromStep)
        named_forks = " or ".join(f.mode_names[m] for m in FORKING_MODES)
        raise _invalid(f.from_step, f"{f.from_step} is only for {f.mode} {named_forks}")
    if mode is ReplayMode.RECORDED and (prompt or model):
        raise _invalid(
            f.prompt if prompt else f.model,
            f"{f.mode} {named} replays the recorded model answers: "
            f"{f.prompt}/{f.model} need a live mode",
        )


def build_replay_plan(
    run_id: str,
    mode: ReplayMode,
    *,
    replay_id: str,
    sampling_seed: int,
    prompt: str | None = None,
    model: str | None = None,
    from_step: str | None = None,
    policy: str | None = None,
    retriever: str | None = None,
    deny_approvals: tuple[str, ...] = (),
    repeat: int = 1,
    budget: ReplayBudget | None = None,
    miss: FixtureMissPolicy = FixtureMissPolicy.FAIL,
    simulation: bool = False,
    fields: PlanFields = PLAN_FIELDS,
    substitute_model: str | None = None,
    max_loop_calls: int | None = None,
    system_prompt: str | None = None,
    tools: str | None = None,
    tools_module: ToolsModulePin | None = None,
) -> ReplayPlan:
    """Check that the inputs fit the mode (each mismatch named in the caller's ``fields``
    vocabulary) and build the plan; ``InvalidInputError`` with ``field`` set otherwise.
    ``max_loop_calls``: the per-replay cap on a tool loop's live model calls (None: the
    default, ``DEFAULT_MAX_LOOP_CALLS``; 0: no cap but the recorded run's own limit).
    ``system_prompt``/``tools``: a tool-loop run's candidate system prompt and tool catalogue
    (artifact digests)."""
    _check_mode_inputs(fields, mode, prompt, model, from_step, (system_prompt, tools))
    if repeat < 1 or repeat > MAX_REPEAT:
        raise _invalid(
            fields.repeat, f"{fields.repeat} must be between 1 and {MAX_REPEAT}, not {repeat}"
        )
    if max_loop_calls is not None and max_loop_calls < 0:
        raise _invalid(fields.max_loop_calls, f"{fields.max_loop_calls} must not be negative")
    if tools_module is not None and miss is not FixtureMissPolicy.SANDBOX_LIVE:
        raise _invalid(
            fields.tools_module,
            f"{fields.tools_module} {tools_module.module}: the team's tools answer fixture "
            f"misses only under {fields.sandbox_live} (here {miss.value})",
        )
    cap = DEFAULT_MAX_LOOP_CALLS if max_loop_calls is None else (max_loop_calls or None)
    return ReplayPlan(
        replay_id=replay_id,
        source_run_id=run_id,
        mode=mode,
        prompt_version=prompt,
        model_name=model,
        substitute_model=substitute_model,
        candidate_system_prompt=system_prompt,
        candidate_tools=tools,
        tools_module=tools_module,
        policy_version=policy,
        retriever_version=retriever,
        deny_approvals=tuple(deny_approvals),
        from_step=from_step,
        miss_policy=miss,
        budget=budget if budget is not None else ReplayBudget(),
        repeat=repeat,
        simulation=simulation,
        sampling_seed=sampling_seed,
        max_loop_calls=cap,
        default_loop_cap=max_loop_calls is None,
    )


def candidate_mode(candidates: Mapping[str, str]) -> ReplayMode:
    """The mode a set of swaps implies: a prompt swap (a prompt bundle, or a tool-loop run's
    system prompt or tool catalogue), else a model swap, else an exact replay under the
    swapped policy or retriever."""
    if any(kind in candidates for kind in PROMPT_CANDIDATES):
        return ReplayMode.PROMPT_SWAP
    if "model" in candidates:
        return ReplayMode.MODEL_SWAP
    return ReplayMode.EXACT


def plan_for_candidates(
    run_id: str,
    candidates: Mapping[str, str],
    *,
    replay_id: str,
    sampling_seed: int,
    miss: FixtureMissPolicy,
    repeat: int = 1,
    fields: PlanFields = PLAN_FIELDS,
    substitute_model: str | None = None,
    tools_module: ToolsModulePin | None = None,
) -> ReplayPlan:
    """The plan that replays ``run_id`` with ``candidates`` (``{"prompt": "v18"}``…) swapped
    in: what a counterfactual of an incident and a regression-gate replay run;
    ``substitute_model`` stands for the recorded model (a model swap's candidate wins)."""
    unknown = sorted(set(candidates) - set(CANDIDATE_KINDS))
    if unknown:
        raise _invalid(
            fields.candidate,
            f"{fields.candidate} {unknown[0]}=…: not supported (use {', '.join(CANDIDATE_KINDS)})",
        )
    mode = candidate_mode(candidates)
    if mode is ReplayMode.PROMPT_SWAP and candidates.get("model") and not substitute_model:
        # a prompt and a model together (``regress --candidate prompt=V --model M``): the
        # prompt swap calls that model (a prompt swap otherwise calls the recorded one)
        substitute_model = candidates["model"]
    return build_replay_plan(
        run_id,
        mode,
        replay_id=replay_id,
        sampling_seed=sampling_seed,
        prompt=candidates.get("prompt"),
        model=candidates.get("model"),
        policy=candidates.get("policy"),
        retriever=candidates.get("retriever"),
        system_prompt=candidates.get("system_prompt"),
        tools=candidates.get("tools"),
        repeat=repeat,
        miss=miss,
        fields=fields,
        substitute_model=substitute_model,
        tools_module=tools_module,
    )
