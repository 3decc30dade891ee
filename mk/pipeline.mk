# The GitLab pipeline run here: .gitlab-ci.yml's jobs by gitlab-ci-local in
# its shell executor, against a registry, a KinD cluster and Argo CD on this
# machine (scripts/pipeline.sh; docs/install.md, "GitLab CI").
PIPELINE_ENV := CACHE_DIR=$(abspath $(CACHE)) KIND_CLUSTER=$(or $(PIPELINE_CLUSTER),gpu-scheduler-pipeline)

.PHONY: pipeline pipeline-down test-pipeline

pipeline: install tools lint-tools ##dev a release tag's pipeline by gitlab-ci-local: lint, test, build (to a local registry), e2e (KinD pulls from it), release (promote, sign with SBOM, charts), deploy (Argo CD); stops all after (PIPELINE_KEEP=1 keeps it)
	$(PIPELINE_ENV) scripts/pipeline.sh run

pipeline-down: ##dev stop what make pipeline left running (PIPELINE_KEEP=1): KinD cluster, git daemon, registry
	$(PIPELINE_ENV) scripts/pipeline.sh down

test-pipeline: install tools lint-tools ##dev make pipeline twice (its test jobs running only tests forced to fail: no release; then TEST_SELECTION=pipeline_sample, passing), with the checks of their records in tests/pipeline
	$(VENV)/bin/pytest -s -m pipeline tests/pipeline
