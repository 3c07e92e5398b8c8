"""infra/register-search-attributes.sh against the real dev server: on a namespace that does
not exist yet it creates the namespace and registers every attribute as Keyword; run again it
changes nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.client import Client

from devstack.temporal_server import SEARCH_ATTRIBUTES

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "register-search-attributes.sh"


def register(address: str, namespace: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TEMPORAL_CLI": str(Path(sys.executable).parent / "temporal"),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": namespace,
    }
    return subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)


async def test_registers_on_a_new_namespace_and_is_idempotent(temporal_server) -> None:
    namespace = f"rb-infra-{uuid.uuid4().hex[:8]}"
    first = await asyncio.to_thread(register, temporal_server.address, namespace)
    assert first.returncode == 0, first.stderr
    assert f"creating namespace {namespace}" in first.stdout
    assert first.stdout.count("registered (Keyword)") == len(SEARCH_ATTRIBUTES)

    client = await Client.connect(temporal_server.address, namespace=namespace)
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace), retry=True
    )
    for name in SEARCH_ATTRIBUTES:
        assert listed.custom_attributes[name] == IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD

    again = await asyncio.to_thread(register, temporal_server.address, namespace)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("already registered") == len(SEARCH_ATTRIBUTES)
    assert "creating namespace" not in again.stdout
