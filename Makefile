# gpu-scheduler: `make demo` runs the main job on a local control plane, `make test` runs every test.
# Every target with a `## `, `##dev ` or `##offline ` comment is listed by `make help`
# (scripts/make-help.awk), in those three groups.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV  := .venv
PY    := $(VENV)/bin/python
CACHE := .cache
BIN   := $(CACHE)/bin
export PATH := $(abspath $(BIN)):$(abspath $(VENV)/bin):$(PATH)

include $(sort $(wildcard mk/*.mk))

.PHONY: help install lint reference promtool test test-unit test-quick test-images
help: ## the targets: using gpu-scheduler first, then developing it, then the offline machinery
	@awk -f scripts/make-help.awk $(MAKEFILE_LIST)

install: ##dev .venv from uv.lock (hash-checked): both apps + INSTALL_GROUPS ("test lint bench"); idempotent
	@bash scripts/install.sh

lint: install ##dev ruff, the import-linter layer contract, uv.lock up to date with the pyproject files, clusters/ file names
	scripts/uv.sh lock --check
	$(VENV)/bin/python scripts/check-cluster-values.py
	$(VENV)/bin/ruff check apps tests
	$(VENV)/bin/ruff format --check apps tests
	cd apps/scheduler && ../../$(VENV)/bin/lint-imports --config ../../.importlinter

promtool: ##dev promtool (the Prometheus version cluster/prometheus/go.mod pins) into .cache/bin, for the alerts' tests: yours on PATH, else the release (checked against its sha256sums.txt), else built from its Go module once per machine
	@bash scripts/promtool.sh >/dev/null

reference: install ##dev docs/reference.md's flags and metrics, written from the code (a unit test fails when they are stale)
	$(PY) scripts/reference.py

# TEST_SELECTION (CI's test jobs; .gitlab-ci.yml): a pytest -k expression the
# test targets add to their own selection. Unset, every test runs.
export TEST_SELECTION
UNIT_TESTS := not cluster and not e2e and not faults and not images and not kind and not argocd and not pipeline

# The unit tests in two workers (pytest-xdist): 104-106 s against 189-194 s in one on our
# 2 cores (2026-12-06, docs/development.md).
UNIT_WORKERS ?= 2

test-unit: install promtool ##dev fast tests: pure code, the webhook over real TLS, chart and CI checks (no cluster), in UNIT_WORKERS (2) workers; TEST_SELECTION narrows them
	$(VENV)/bin/pytest -n $(UNIT_WORKERS) -m "$(UNIT_TESTS)" $(if $(TEST_SELECTION),-k "$(TEST_SELECTION)")

test-quick: lint test-unit ##dev lint and the unit tests: the quick loop (about 2 min; make test proves all)

test-images: install ##dev the image tests: make images, then each image run as users run it (needs Docker)
	$(VENV)/bin/pytest -m images tests/images

test: install ## every test once: lint, unit, images, the local control plane beside KinD + Argo CD, the GitLab pipeline; a stage table at the end
	bash scripts/test.sh
