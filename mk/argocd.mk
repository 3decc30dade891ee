# Argo CD built here from its Go modules (cluster/argocd/go.mod) and run in
# the KinD cluster (scripts/argocd.sh; docs/install.md, "Argo CD").
ARGOCD_ENV  = CACHE_DIR=$(abspath $(CACHE)) KIND_CLUSTER=$(KIND_CLUSTER) \
              SCHEDULER_IMAGE=$(SCHEDULER_IMAGE) CHECK_IMAGE=$(CHECK_IMAGE) BUILD_IMAGES=$(BUILD_IMAGES)

.PHONY: argocd argocd-images argocd-install argocd-uninstall argocd-e2e

argocd: ##offline build the argocd binary (v3.5.7, version-stamped) into the machine's build store, linked as .cache/bin/argocd; cached by its inputs
	$(ARGOCD_ENV) scripts/argocd.sh binary

argocd-images: ##offline docker build Argo CD's image (the binary, git, ssh, helm, kustomize) and redis on the offline Debian base; cached
	$(ARGOCD_ENV) scripts/argocd.sh images

argocd-install: tools ## Argo CD in the KinD cluster (namespace argocd, Progressive Syncs on); idempotent
	$(ARGOCD_ENV) scripts/argocd.sh install

argocd-uninstall: tools ## remove Argo CD (its Applications first, then namespace argocd, CRDs, cluster RBAC) from the KinD cluster
	$(ARGOCD_ENV) scripts/argocd.sh uninstall

argocd-e2e: install tools ## on KinD (after make kind-up; before make e2e): Argo CD syncs both charts, in order, from a local OCI registry with values from a platform's git repository; removes the apps after
	$(ARGOCD_ENV) scripts/argocd.sh e2e
