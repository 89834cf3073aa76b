# Two entry points for a fresh machine (Python 3.11 + pip): `make run` and `make test`.
# Everything is installed into .venv from the pinned requirements.lock.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
# Kedro telemetry is off for every `kedro` command in the project (.telemetry:
# consent: false); these also cover tools run from here outside it.
export DO_NOT_TRACK := true
export KEDRO_DISABLE_TELEMETRY := true
export UV_PYTHON_DOWNLOADS := never
# `make server`: where the team MLflow server listens and keeps its runs.
MLFLOW_HOST ?= 127.0.0.1
MLFLOW_PORT ?= 5000
SERVER_DIR ?= mlflow-server

.PHONY: run test lint lock server rerun scheduled clean-venv

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Reinstall whenever the lock or the project metadata changes. `uv pip sync`
# makes .venv exactly the lock (anything else is removed; every file is checked
# against the lock's hashes), then the project itself goes in on top (sync takes
# it out). Bytecode is compiled here: where PYTHONDONTWRITEBYTECODE is set (as on
# the machines here), Python would otherwise compile every module it imports from
# source in every process, 8-9 s of each `kedro run`. requirements.lock.sha256
# records the lock .venv was synced from, so `ensemble-bo rerun` can tell whether
# it matches a run's lock.
$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip sync --python $(BIN)/python --quiet --require-hashes --compile-bytecode requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --quiet --no-deps -e .
	$(BIN)/python -m compileall -q src
	$(BIN)/python -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' \
		requirements.lock > $(VENV)/requirements.lock.sha256
	touch $@

# Quiet: a progress bar, then the MLflow run, its test metrics and where to look.
# More: make run ARGS=--verbose (Kedro's dataset lines, an error's traceback).
run: $(VENV)/.installed
	$(BIN)/kedro run --pipelines=segor $(ARGS)

test: $(VENV)/.installed
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: $(VENV)/.installed
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# Regenerate the pinned lock after changing dependencies in pyproject.toml
# (every distribution with its sha256; versions already in the lock are kept
# unless pyproject.toml rules them out: `uv pip compile` reuses its output file).
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 \
		--no-header --generate-hashes --output-file requirements.lock

# A team MLflow server: runs in $(SERVER_DIR)/mlflow.db, artifacts uploaded
# through the server (proxied) into $(SERVER_DIR)/artifacts. Point runs at it
# with MLFLOW_TRACKING_URI=http://$(MLFLOW_HOST):$(MLFLOW_PORT).
server: $(VENV)/.installed
	mkdir -p $(SERVER_DIR)/artifacts
	$(BIN)/mlflow server --host $(MLFLOW_HOST) --port $(MLFLOW_PORT) \
		--backend-store-uri sqlite:///$(abspath $(SERVER_DIR))/mlflow.db \
		--serve-artifacts --artifacts-destination $(abspath $(SERVER_DIR))/artifacts

# Run an earlier MLflow run again with its recorded parameters:
# make rerun RUN=<run id> (or ARGS=--last ...; ARGS is passed on). Without
# either, stop before anything is installed.
ifneq ($(filter rerun,$(MAKECMDGOALS)),)
ifeq ($(strip $(RUN)$(ARGS)),)
$(error make rerun RUN=<mlflow run id> (or ARGS=--last ...))
endif
endif
rerun: $(VENV)/.installed
	$(BIN)/ensemble-bo rerun $(RUN) $(ARGS)

# The scheduled runs (ensemble-bo scheduled; options in ARGS).
scheduled: $(VENV)/.installed
	$(BIN)/ensemble-bo scheduled $(ARGS)

clean-venv:
	rm -rf $(VENV)
