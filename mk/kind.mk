# KinD on machines that cannot pull kindest/node (ours): the kind binary, the
# node image assembled offline, and the tests on a real KinD cluster.
# kind-up / kind-down / e2e themselves are in mk/delivery.mk; docs/delivery-internals.md
# says how scripts/kind.sh picks the node image (KIND_NODE_IMAGE).
.PHONY: kind kind-node-image test-kind

kind: ## kind (the version cluster/kind/go.mod pins) into .cache/bin, unless one is there or on PATH: the release binary (sha256 checked against the release's), else built from Go modules
	CACHE_DIR=$(abspath $(CACHE)) scripts/kind-binary.sh

kind-node-image: ##offline assemble the KinD node image offline (Debian packages, Go modules, images built here); cached by a hash of its inputs
	CACHE_DIR=$(abspath $(CACHE)) scripts/kind-node-image.sh

test-kind: install ##dev real KinD cluster: node names, a pod's logs on node3, Service + CoreDNS, kind load, restart, kind-down (needs Docker)
	$(VENV)/bin/pytest -m kind tests/kind
