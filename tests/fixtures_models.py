"""The local model server, started once per test session and per xdist worker (the real
``llama_cpp.server`` with both local models, as ``replaybook dev up`` runs it): one fixture for
every folder whose tests call a real model (``tests/local_models``, ``tests/sdk``), so a worker
that runs both starts one server, not two.

Every wait here has a deadline: the server's start (``START_TIMEOUT``), each model call (the
registry's timeout, ``MODEL_CALL_TIMEOUT``: the provider bounds the whole call, not each read),
and the teardown (SIGTERM, then SIGKILL, then the reaping of the process). The server is killed
by the kernel if this test process dies before its teardown runs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.components import dev_dir
from devstack.model_server import launch_model_server
from devstack.ports import free_ports
from devstack.processes import pid_alive, terminate

#: seconds a single model call may take in these tests (a short answer takes a few seconds
#: even on two busy cores; a call past this fails the test instead of waiting)
MODEL_CALL_TIMEOUT = 120


def _stop_server(record: dict[str, Any]) -> None:
    """SIGTERM the server's group, SIGKILL after 10 s, and reap it (it is this process's child:
    left unreaped it would stay a zombie until the session ends)."""
    pid = record["pid"]
    try:
        terminate(pid, record["pid_start"], timeout=10)
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                reaped, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # already reaped (by subprocess's own clean-up)
                break
            if reaped:
                break
            time.sleep(0.05)
        assert not pid_alive(pid, record["pid_start"]), f"the model server {pid} is still running"


@pytest.fixture(scope="session")
def local_models_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("model-server")
    dev_dir(home).mkdir(parents=True)
    record = launch_model_server(
        home, free_ports(1)[0], {"PATH": "/usr/bin:/bin"}, die_with_parent=True
    )
    try:
        yield record["base_url"]
    finally:
        _stop_server(record)
