# Two entry points for a fresh machine (Python 3.11 + pip): `make run` and `make test`.
# Everything is installed into .venv from the pinned requirements.lock.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.8
# Kedro asks for telemetry consent on first run; nobody on this team opts in.
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

run: $(VENV)/.installed
	$(BIN)/kedro run --pipelines=segor
	@echo
	@echo "Results are in the MLflow store of this project. Open them with:"
	@echo "  $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db"
	@echo "then browse http://127.0.0.1:5000 (experiment 'ensemble_bo')."

test: $(VENV)/.installed
	$(BIN)/python -m pytest

lint: $(VENV)/.installed
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# Regenerate the pinned lock after changing dependencies in pyproject.toml.
lock: | $(BIN)/uv
	$(BIN)/uv pip compile pyproject.toml --extra dev --python-version 3.11 \
		--no-header --output-file requirements.lock

clean-venv:
	rm -rf $(VENV)
