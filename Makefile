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
# Who may use it: basic (MLflow's basic-auth app, a user name and password for
# every request) or none (anyone who reaches the port reads and changes every
# run). Unset, a server on a loopback host is open and any other host must choose.
MLFLOW_AUTH ?=
# basic: what a signed-in user may do in an experiment nobody granted them.
# READ: the whole team sees and compares every run, while only the experiment's
# creator (MANAGE) and those they or an admin grant EDIT change runs or artifacts.
MLFLOW_AUTH_DEFAULT_PERMISSION ?= READ
# basic: seconds a checked password is remembered. Checking one costs about 0.1 s
# by design (scrypt), and a run makes a few hundred requests: without the cache a
# small run against the server takes 50 s instead of 11. A changed password or a
# deleted user may still be accepted that long by the server's other workers; 0
# checks every request.
MLFLOW_AUTH_CACHE_SECONDS ?= 60
# The Host headers it answers, comma-separated, as clients write the server in
# their URI (mlflow.team:5000); unset: MLflow's default, localhost and private IPs.
MLFLOW_ALLOWED_HOSTS ?=

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
	$(BIN)/uv pip compile pyproject.toml --extra dev --extra lightgbm --extra catboost --python-version 3.11 \
		--no-header --generate-hashes --output-file requirements.lock

# A team MLflow server: runs in $(SERVER_DIR)/mlflow.db, artifacts uploaded
# through the server (proxied) into $(SERVER_DIR)/artifacts. Point runs at it
# with MLFLOW_TRACKING_URI=http://$(MLFLOW_HOST):$(MLFLOW_PORT).
# MLFLOW_AUTH=basic: users in $(SERVER_DIR)/basic_auth.db; the first start creates
# the admin, MLFLOW_AUTH_ADMIN_USERNAME (admin) with MLFLOW_AUTH_ADMIN_PASSWORD
# (MLflow reads both from the environment). MLflow's auth settings are written
# to $(SERVER_DIR)/basic_auth.ini at each start (no password in it), unless
# MLFLOW_AUTH_CONFIG_PATH names your own file. The key that signs the forms of
# MLflow's user pages is MLFLOW_FLASK_SERVER_SECRET_KEY, or a new random one.
# The choices are checked before anything is installed.
ifneq ($(filter server,$(MAKECMDGOALS)),)
ifneq ($(filter-out basic none,$(MLFLOW_AUTH)),)
$(error MLFLOW_AUTH=$(MLFLOW_AUTH) is not a choice: basic (a user name and password for every request) or none (an open server))
endif
ifeq ($(strip $(MLFLOW_AUTH))$(filter 127.% localhost ::1,$(MLFLOW_HOST)),)
$(error make server MLFLOW_HOST=$(MLFLOW_HOST) lets other machines in, and nobody would be asked for a password. Add MLFLOW_AUTH=basic for MLflow's user logins (the first start needs MLFLOW_AUTH_ADMIN_PASSWORD; docs/usage.md, "A team server"), or MLFLOW_AUTH=none to accept an open server)
endif
ifeq ($(MLFLOW_AUTH),basic)
ifneq ($(MLFLOW_AUTH_CONFIG_PATH),)
ifeq ($(wildcard $(MLFLOW_AUTH_CONFIG_PATH)),)
$(error MLFLOW_AUTH_CONFIG_PATH=$(MLFLOW_AUTH_CONFIG_PATH): no such file; name your MLflow auth settings (an ini with an [mlflow] section), or unset it to use $(SERVER_DIR)/basic_auth.ini)
endif
else
# exactly one word, and a permission MLflow knows
ifneq ($(strip $(MLFLOW_AUTH_DEFAULT_PERMISSION)),$(or $(filter READ USE EDIT MANAGE NO_PERMISSIONS,$(MLFLOW_AUTH_DEFAULT_PERMISSION)),-))
$(error MLFLOW_AUTH_DEFAULT_PERMISSION=$(MLFLOW_AUTH_DEFAULT_PERMISSION) is not a permission: READ, USE, EDIT, MANAGE or NO_PERMISSIONS)
endif
ifneq ($(shell printf '%s' '$(MLFLOW_AUTH_CACHE_SECONDS)' | grep -xE '[0-9]+'),$(or $(MLFLOW_AUTH_CACHE_SECONDS),-))
$(error MLFLOW_AUTH_CACHE_SECONDS=$(MLFLOW_AUTH_CACHE_SECONDS) is not a whole number of seconds (0: check the password on every request))
endif
ifeq ($(wildcard $(SERVER_DIR)/basic_auth.db)$(MLFLOW_AUTH_ADMIN_PASSWORD),)
$(error MLFLOW_AUTH=basic: the first start creates the server's admin user and needs its password in MLFLOW_AUTH_ADMIN_PASSWORD (12 characters or more; read -rs MLFLOW_AUTH_ADMIN_PASSWORD && export MLFLOW_AUTH_ADMIN_PASSWORD))
endif
AUTH_CONFIG := $(abspath $(SERVER_DIR))/basic_auth.ini
WRITE_AUTH_CONFIG := printf '%s\n' '; written by make server at each start' '[mlflow]' \
	'default_permission = $(MLFLOW_AUTH_DEFAULT_PERMISSION)' \
	'database_uri = sqlite:///$(abspath $(SERVER_DIR))/basic_auth.db' \
	'admin_username = admin' 'auth_cache_ttl_seconds = $(MLFLOW_AUTH_CACHE_SECONDS)' \
	> $(AUTH_CONFIG)
MLFLOW_AUTH_CONFIG_PATH := $(AUTH_CONFIG)
endif
# recursive (=): $$ stays a shell $ until the recipe runs
AUTH_ENV = MLFLOW_AUTH_CONFIG_PATH=$(MLFLOW_AUTH_CONFIG_PATH) \
	MLFLOW_FLASK_SERVER_SECRET_KEY="$${MLFLOW_FLASK_SERVER_SECRET_KEY:-$$($(BIN)/python -c 'import secrets; print(secrets.token_hex(32))')}"
AUTH_APP := --app-name basic-auth
endif
endif
SERVER_OPTIONS = $(if $(MLFLOW_ALLOWED_HOSTS), --allowed-hosts '$(MLFLOW_ALLOWED_HOSTS)')$(if $(AUTH_APP), $(AUTH_APP))
server: $(VENV)/.installed
	mkdir -p $(SERVER_DIR)/artifacts
	$(WRITE_AUTH_CONFIG)
	$(AUTH_ENV) $(BIN)/mlflow server --host $(MLFLOW_HOST) --port $(MLFLOW_PORT) \
		--backend-store-uri sqlite:///$(abspath $(SERVER_DIR))/mlflow.db \
		--serve-artifacts --artifacts-destination $(abspath $(SERVER_DIR))/artifacts$(SERVER_OPTIONS)

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
