# gpu-scheduler: `make demo` runs the main job on a local control plane, `make test` runs every test.
# Every target with a `## ` comment is listed by `make help`.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV  := .venv
PY    := $(VENV)/bin/python
CACHE := .cache
BIN   := $(CACHE)/bin
export PATH := $(abspath $(BIN)):$(abspath $(VENV)/bin):$(PATH)

include $(sort $(wildcard mk/*.mk))

.PHONY: help install lint test test-unit
help: ## list the targets
	@grep -hE '^[a-z][a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(VENV)/.installed: apps/scheduler/pyproject.toml apps/check/pyproject.toml requirements-dev.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt -e apps/scheduler -e apps/check
	@touch $@

install: $(VENV)/.installed ## create .venv with gpu-scheduler and gpu-scheduler-check (idempotent)

lint: install ## ruff and the import-linter layer contract
	$(VENV)/bin/ruff check apps tests
	$(VENV)/bin/ruff format --check apps tests
	cd apps/scheduler && ../../$(VENV)/bin/lint-imports --config ../../.importlinter

test-unit: install ## fast tests: pure code, the webhook over real TLS, chart and CI checks (no cluster)
	$(VENV)/bin/pytest -m "not cluster and not e2e and not faults and not kind"

test: install ## every test: unit, then the real local control plane (e2e, faults); tears the cluster down
	bash scripts/test.sh
