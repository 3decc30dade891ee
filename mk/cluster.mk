# Local Kubernetes control plane without Docker: host processes + KWOK fake nodes.
# Everything lives under $(CACHE) (binaries in $(CACHE)/bin, cluster state in
# $(CACHE)/local-cluster). See cluster/local/README.md.
CLUSTER_ENV := CACHE_DIR=$(abspath $(CACHE))

.PHONY: control-plane tools local-up local-down

control-plane: ##offline Build kube-apiserver/-controller-manager/-scheduler, etcd, kwok, kwokctl into .cache/bin
	$(CLUSTER_ENV) scripts/build-control-plane.sh

tools: ## Fetch kubectl and helm into .cache/bin
	$(CLUSTER_ENV) scripts/fetch-tools.sh

local-up: ## Start the local KWOK cluster (LOCAL_NODES=4 fake GPU nodes); kubeconfig in .cache/local-cluster/kubeconfig
	$(CLUSTER_ENV) scripts/local-up.sh

local-down: ## Stop the local KWOK cluster and delete .cache/local-cluster
	$(CLUSTER_ENV) scripts/local-down.sh

.PHONY: test-cluster
test-cluster: install tools control-plane ##dev the cluster, e2e and fault tests on the local control plane, brought up and torn down (CI's test-cluster job)
	$(CLUSTER_ENV) scripts/test-cluster.sh

.PHONY: test-compat
test-compat: install tools control-plane ##dev the tests marked compat on a second local control plane of Kubernetes 1.35 (cluster/compat: the oldest the charts accept), brought up and torn down (make test's 1.35 stage)
	$(CLUSTER_ENV) scripts/test-compat.sh
