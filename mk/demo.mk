# The task end to end on the local control plane, and a report of it.
# See scripts/demo.sh and scripts/report.py; their engine is tests/e2e, shared with the e2e suite.
KEEP ?= 0
REPORT_CLUSTER ?=
DEMO_ENV := CACHE_DIR=$(abspath $(CACHE)) KEEP=$(KEEP)
LOCAL_KUBECONFIG := $(abspath $(CACHE))/local-cluster/kubeconfig

.PHONY: demo report e2e-local

demo: install ## run the task on the local cluster: 5 check pods placed by the map, PASS/FAIL (KEEP=1: leave it up)
	$(DEMO_ENV) bash scripts/demo.sh

report: install tools ## .cache/report/report.md: pods, placements, logs of the check pods on node3/node4; on KinD when it runs (REPORT_CLUSTER=kind|local)
	@$(DEMO_ENV) KIND_CLUSTER=$(KIND_CLUSTER) SCHEDULER_IMAGE=$(SCHEDULER_IMAGE) CHECK_IMAGE=$(CHECK_IMAGE) \
	  BUILD_IMAGES=$(BUILD_IMAGES) REPORT_CLUSTER=$(REPORT_CLUSTER) bash scripts/report.sh

e2e-local: install ##dev the e2e suite alone, against the local cluster (started if needed, left up)
	CACHE_DIR=$(abspath $(CACHE)) bash scripts/local-up.sh
	KUBECONFIG=$(LOCAL_KUBECONFIG) $(VENV)/bin/pytest -m e2e tests/e2e
