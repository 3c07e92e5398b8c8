"""The local model server's threads per request: one unless the environment asks for more
(``devstack.model_server.server_threads``), and what the environment asks is checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from devstack.model_server import THREADS_ENV, server_config, server_threads
from models.errors import ConfigurationError


def test_one_thread_unless_asked_and_the_config_carries_it() -> None:
    assert server_threads({}) == 1
    assert server_threads({THREADS_ENV: " 4 "}) == 4
    config = server_config(1234, {"m": Path("/m.gguf")}, server_threads({THREADS_ENV: "3"}))
    assert [(m["n_threads"], m["n_threads_batch"]) for m in config["models"]] == [(3, 3)]


@pytest.mark.parametrize("text", ["0", "-1", "two", "1.5"])
def test_a_bad_thread_count_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigurationError, match=THREADS_ENV):
        server_threads({THREADS_ENV: text})
