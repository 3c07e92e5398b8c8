"""The Temporal dev server launcher against the real ``temporal`` binary."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    ListSearchAttributesRequest,
    RemoveSearchAttributesRequest,
)
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes
from temporalio.worker import Worker

from devstack.ports import free_ports, port_is_free
from devstack.stack import pid_alive
from devstack.temporal_server import (
    SEARCH_ATTRIBUTES,
    TemporalDevServer,
    start_temporal_dev_server,
)
from models.errors import ConfigurationError, StoreError

KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


async def custom_attributes(client: Client, namespace: str) -> dict[str, int]:
    # retry=True: a raw service call is not retried by default, and the front end recycles
    # connections (a GOAWAY every 5 minutes), which cancels a call racing it ("operation was
    # canceled"); a session-long client meets that (test_raw_calls_ride_out_recycled_connections)
    response = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace), retry=True
    )
    return dict(response.custom_attributes)


def assert_gone(server: TemporalDevServer) -> None:
    assert not server.running()
    assert not pid_alive(server.pid)
    for port in server.ports.values():
        assert port_is_free(server.host, port), port


async def test_session_server_is_ready_with_search_attributes(
    temporal_server: TemporalDevServer, temporal_client: Client
) -> None:
    assert temporal_server.running()
    assert temporal_server.address == f"127.0.0.1:{temporal_server.port}"
    for port in temporal_server.ports.values():  # every port it was given answers
        assert answers(temporal_server.host, port), port
    registered = await custom_attributes(temporal_client, temporal_server.namespace)
    assert {name: registered.get(name) for name in SEARCH_ATTRIBUTES} == dict.fromkeys(
        SEARCH_ATTRIBUTES, KEYWORD
    )
    assert temporal_server.db_path.is_file()


@activity.defn(name="TestIdleActivity")
async def idle_activity() -> None:
    """Nothing: the worker is here for its long polls, which hold the connection being recycled."""


async def test_raw_calls_ride_out_recycled_connections(tmp_path: Path) -> None:
    """A client that lives longer than the front end's connection age (5 minutes by default,
    as in the suite's session and on Temporal Cloud) sees its connection recycled under a
    worker's long polls; a raw service call racing the GOAWAY is cancelled unless it is
    retried. Here the age is one second and the calls run back to back for five: with
    ``retry=False`` in ``custom_attributes`` this failed on every run tried."""
    recycle = {"frontend.keepAliveMaxConnectionAge": '"1s"'}
    with start_temporal_dev_server(tmp_path, headless=True, dynamic_config=recycle) as server:
        client = await Client.connect(server.address)
        queue = f"idle-{uuid.uuid4().hex}"
        async with Worker(client, task_queue=queue, activities=[idle_activity]):
            calls = 0
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                registered = await custom_attributes(client, server.namespace)
                assert {name: registered.get(name) for name in SEARCH_ATTRIBUTES} == (
                    dict.fromkeys(SEARCH_ATTRIBUTES, KEYWORD)
                )
                calls += 1
    assert calls > 20  # it did span several recycles


async def wait_for_count(client: Client, query: str, expected: int) -> None:
    """Visibility is eventually consistent: poll the count with a deadline."""
    async with asyncio.timeout(15):
        while True:
            if (await client.count_workflows(query)).count == expected:
                return
            await asyncio.sleep(0.1)


async def test_restart_on_the_same_db_keeps_workflows(tmp_path: Path) -> None:
    grpc_port, ui_port = free_ports(2)
    replay_status = SearchAttributeKey.for_keyword("ReplayStatus")
    workflow_id = f"restart-{uuid.uuid4().hex}"

    first = start_temporal_dev_server(tmp_path, port=grpc_port, ui_port=ui_port)
    try:
        assert (first.port, first.ui_port) == (grpc_port, ui_port)
        assert first.ui_url == f"http://127.0.0.1:{ui_port}"
        assert answers(first.host, ui_port)
        client = await Client.connect(first.address)
        # A workflow nobody works on: it stays RUNNING, in the database only.
        await client.start_workflow(
            "NobodyRunsThis",
            id=workflow_id,
            task_queue=f"nobody-{uuid.uuid4().hex}",
            search_attributes=TypedSearchAttributes(
                [SearchAttributePair(replay_status, "pending")]
            ),
        )
        await wait_for_count(client, 'ReplayStatus = "pending"', 1)
        # A database that lacks an attribute (created by an older release) gets it on restart.
        await client.operator_service.remove_search_attributes(
            RemoveSearchAttributesRequest(namespace="default", search_attributes=["IncidentPhase"]),
            retry=True,
        )
        assert "IncidentPhase" not in await custom_attributes(client, "default")
    finally:
        first.stop()
    assert_gone(first)

    with start_temporal_dev_server(tmp_path, port=grpc_port, ui_port=ui_port) as second:
        assert second.pid != first.pid
        client = await Client.connect(second.address)
        description = await client.get_workflow_handle(workflow_id).describe()
        assert description.status == WorkflowExecutionStatus.RUNNING
        assert description.workflow_type == "NobodyRunsThis"
        assert description.typed_search_attributes.get(replay_status) == "pending"
        assert (await custom_attributes(client, "default")).get("IncidentPhase") == KEYWORD
        await wait_for_count(client, 'ReplayStatus = "pending"', 1)
    assert_gone(second)


def test_taken_port_is_refused(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"{port} is already in use"):
            start_temporal_dev_server(tmp_path, port=port, headless=True)
    assert not (tmp_path / "temporal.log").exists()  # nothing was started


def test_exit_during_startup_fails_fast_with_the_log(tmp_path: Path) -> None:
    (tmp_path / "temporal.db").mkdir()  # not a file: SQLite cannot open it
    started = time.monotonic()
    with pytest.raises(StoreError, match="exited with code") as excinfo:
        start_temporal_dev_server(tmp_path, headless=True)
    assert time.monotonic() - started < 30
    assert "temporal.log" in str(excinfo.value)


def test_a_port_taken_between_choice_and_bind_is_chosen_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race parallel tests met ("bind: address already in use" for the HTTP API port):
    the first choice hands the server a port another process listens on by the time it
    binds; the launcher sees why the server exited and starts it on ports chosen again."""
    import devstack.temporal_server as launcher

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        choices: list[list[int]] = []

        def choose(
            count: int, host: str = "127.0.0.1", exclude: set[int] | None = None
        ) -> list[int]:
            ports = free_ports(count, host, exclude)
            if not choices:  # the first choice: the HTTP API port is the taken one
                ports[0] = taken_port
            choices.append(ports)
            return ports

        monkeypatch.setattr(launcher, "free_ports", choose)
        server = start_temporal_dev_server(tmp_path, headless=True)
        try:
            assert len(choices) == 2
            assert server.http_port != taken_port
            assert server.running()
            assert answers(server.host, server.port)
            log = server.log_path.read_text(errors="replace")
            assert f"127.0.0.1:{taken_port}: bind: address already in use" in log
        finally:
            server.stop(timeout=10)
    assert_gone(server)


def test_free_ports_are_chosen_outside_the_ephemeral_range() -> None:
    """Ports the OS hands out for port 0 are the ones it may give any outgoing connection
    next; the launchers' ports come from below that range, distinct and free."""
    from devstack.ports import ephemeral_range

    low, high = ephemeral_range()
    ports = free_ports(8, exclude={10000})
    assert len(set(ports)) == 8
    assert 10000 not in ports
    for port in ports:
        assert port_is_free("127.0.0.1", port)
        if low - 10000 >= 1000:
            assert 10000 <= port < low, (port, low, high)
