"""replaybook-sdk: record an LLM agent's runs into Replaybook.

    import replaybook
    replaybook.configure(url="http://127.0.0.1:8080", token="…")   # or REPLAYBOOK_URL / _TOKEN
    with replaybook.run(agent="refund-bot", system_prompt=..., tools=[lookup, refund]) as run:
        client = replaybook.wrap(openai.OpenAI(...))
        ...

Depends on httpx only; see docs/sdk.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from replaybook import _state
from replaybook._config import Config, RecordingError
from replaybook._explicit import approval, policy_decision, retrieval, user_message
from replaybook._openai import wrap
from replaybook._run import SDK_VERSION, Run, current_run
from replaybook._sender import reset_sender, sender
from replaybook._tools import Tool, WriteFailed, idempotency_key, tool

__version__ = SDK_VERSION
__all__ = [
    "Config",
    "RecordingError",
    "Run",
    "Tool",
    "WriteFailed",
    "approval",
    "configure",
    "current_run",
    "flush",
    "idempotency_key",
    "policy_decision",
    "retrieval",
    "run",
    "tool",
    "user_message",
    "wrap",
]


def configure(
    url: str | None = None,
    token: str | None = None,
    spool_dir: str | Path | None = None,
    strict: bool | None = None,
    *,
    flush_interval: float | None = None,
    exit_timeout: float | None = None,
    http_timeout: float | None = None,
    max_batch_events: int | None = None,
) -> Config:
    """Set where runs go; what is not given comes from the environment (``REPLAYBOOK_URL``,
    ``REPLAYBOOK_TOKEN``, ``REPLAYBOOK_SPOOL_DIR``). Returns the configuration in force."""
    config = Config.from_env().updated(
        url=url,
        token=token,
        spool_dir=spool_dir,
        strict=strict,
        flush_interval=flush_interval,
        exit_timeout=exit_timeout,
        http_timeout=http_timeout,
        max_batch_events=max_batch_events,
    )
    _state.set_config(config)
    reset_sender(config)
    return config


def run(
    agent: str,
    *,
    system_prompt: str | None = None,
    tools: Sequence[Any] | None = None,
    model: str | None = None,
    run_id: str | None = None,
    labels: Mapping[str, str] | None = None,
    pinned: Mapping[str, str] | None = None,
    initial_messages: Sequence[Mapping[str, Any]] | None = None,
    user_turns: bool = False,
    max_model_calls: int | None = None,
    terminate_tools: Sequence[str] = (),
    answers_before_end: int = 1,
    attachments: Mapping[str, Any] | None = None,
) -> Run:
    """A recorded run: ``with``/``async with`` it, or decorate a function (each call a run).

    ``tools``: ``@replaybook.tool`` functions or OpenAI tool dicts (the header's catalog).
    What is not given is taken from the first model call: the system prompt (its leading
    system message), the tools offered, the task (its other messages) and the model."""
    return Run(
        agent,
        system_prompt=system_prompt,
        tools=tools,
        model=model,
        run_id=run_id,
        labels=labels,
        pinned=pinned,
        initial_messages=initial_messages,
        user_turns=user_turns,
        max_model_calls=max_model_calls,
        terminate_tools=terminate_tools,
        answers_before_end=answers_before_end,
        attachments=attachments,
    )


def flush(timeout: float = 10.0) -> bool:
    """Send what waits (this process's runs and earlier processes' spool); True when the
    server holds all of it."""
    send = sender(_state.config())
    send.adopt_orphans()
    return send.drain(timeout)
