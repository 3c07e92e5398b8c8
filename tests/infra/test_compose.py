"""infra/compose.yaml, checked without a Docker engine: it parses, every service names a
pinned image, a command, its environment and networks that exist; replay workers are isolated;
every variable is documented; the files it mounts or builds from exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.temporal_server import SEARCH_ATTRIBUTES
from models.queues import CONTROL_QUEUE, REPLAY_QUEUE

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
REPLAYBOOK_SERVICES = ("api", "control-worker", "replay-worker")
#: what a replay worker must never hold (rule 4, rule 16)
FORBIDDEN_IN_REPLAY = re.compile(r"KEK|API_TOKENS|PAYMENT|SMTP|EMAIL|CRM|STRIPE|WRITE|PROVIDER")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((INFRA / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def readme() -> str:
    return (INFRA / "README.md").read_text()


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "environment is written as a mapping"
    return {k: str(v) for k, v in env.items()}


def test_every_service_is_complete(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {
        "postgresql",
        "temporal",
        "temporal-ui",
        "register-search-attributes",
        "s3",
        "api",
        "control-worker",
        "replay-worker",
    }
    declared_networks = set(compose["networks"])
    for name, service in services.items():
        image = service.get("image", "")
        tag = image.rsplit(":", 1)[-1] if ":" in image else ""
        assert tag and tag != "latest" and not tag.endswith(":-latest}"), f"{name}: pin {image!r}"
        assert service.get("command"), f"{name} has no command"
        assert isinstance(service["command"], list), f"{name}: exec-form command"
        assert env_of(service), f"{name} has no environment"
        networks = service.get("networks")
        assert networks and set(networks) <= declared_networks, f"{name}: networks {networks}"
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"
    for name in REPLAYBOOK_SERVICES:
        assert services[name]["build"]["dockerfile"] == "infra/Dockerfile"


def test_temporal_is_backed_by_postgresql(compose: dict[str, Any]) -> None:
    env = env_of(compose["services"]["temporal"])
    assert env["DB"] == "postgres12" and env["POSTGRES_SEEDS"] == "postgresql"
    ui = env_of(compose["services"]["temporal-ui"])
    assert ui["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_replaybook_processes_use_the_production_stores(compose: dict[str, Any]) -> None:
    for name in REPLAYBOOK_SERVICES:
        env = env_of(compose["services"][name])
        assert env["REPLAYBOOK_DATABASE_URL"].startswith("postgresql://"), name
        assert env["REPLAYBOOK_ARTIFACTS"].startswith("s3://"), name
        assert env["REPLAYBOOK_S3_ENDPOINT_URL"] == "http://s3:9000", name
        assert env["TEMPORAL_ADDRESS"] == "temporal:7233", name
        assert env["REPLAYBOOK_LOG_FORMAT"] == "json", name
    services = compose["services"]
    assert services["control-worker"]["command"][-2:] == ["--queue", "control"]
    assert services["replay-worker"]["command"][-2:] == ["--queue", "replay"]
    assert services["api"]["command"][:2] == ["replaybook", "api"]
    for name in ("control-worker", "replay-worker"):
        env = env_of(services[name])
        assert env["REPLAYBOOK_METRICS_PORT"] and env["REPLAYBOOK_TEMPORAL_METRICS_PORT"]


def test_replay_workers_are_isolated(compose: dict[str, Any]) -> None:
    services = compose["services"]
    replay = services["replay-worker"]
    assert replay["networks"] == ["replay"]
    assert compose["networks"]["replay"] == {"internal": True}
    # on the replay network: only the stores and Temporal
    on_replay = {n for n, s in services.items() if "replay" in s["networks"]}
    assert on_replay == {"replay-worker", "temporal", "postgresql", "s3"}
    env = env_of(replay)
    assert not [k for k in env if FORBIDDEN_IN_REPLAY.search(k)]
    assert "secrets" not in replay and "ports" not in replay
    assert env["REPLAYBOOK_SANDBOX"] == "bubblewrap"
    assert replay.get("read_only") is True
    # the control pool holds the raw-evidence key, the replay pool does not
    assert "REPLAYBOOK_KEK_FILE" in env_of(services["control-worker"])


def test_every_variable_is_documented(compose: dict[str, Any], readme: str) -> None:
    text = (INFRA / "compose.yaml").read_text()
    interpolated = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    used = interpolated | {
        k for name in REPLAYBOOK_SERVICES for k in env_of(compose["services"][name])
    }
    undocumented = sorted(v for v in used if f"`{v}`" not in readme)
    assert not undocumented


def test_mounted_and_built_files_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes") or []:
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (INFRA / source).is_file(), f"{name} mounts missing {source}"
    for secret in compose["secrets"].values():
        assert secret["file"].startswith("./secrets/")  # written by the operator, never committed
    dockerfile = (INFRA / "Dockerfile").read_text()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert f"COPY {package} ./{package}" in dockerfile, f"Dockerfile misses {package}"


def test_search_attribute_script_matches_the_workflows() -> None:
    script = (INFRA / "register-search-attributes.sh").read_text()
    (listed,) = re.findall(r'^attributes="([^"]+)"', script, flags=re.M)
    assert tuple(listed.split()) == SEARCH_ATTRIBUTES


def test_task_queues_in_the_readme_are_the_real_ones(readme: str) -> None:
    assert CONTROL_QUEUE in readme and REPLAY_QUEUE in readme
