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

.PHONY: run test lint lock clean-venv

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# Reinstall whenever the lock or the project metadata changes.
$(VENV)/.installed: requirements.lock pyproject.toml | $(BIN)/uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet -r requirements.lock
	$(BIN)/uv pip install --python $(BIN)/python --quiet --no-deps -e .
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

# Regenerate the pinned lock after changing dependencies in pyproject.toml.
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 \
		--no-header --output-file requirements.lock

clean-venv:
	rm -rf $(VENV)
