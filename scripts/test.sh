#!/usr/bin/env bash
# `make test`: every test once, each stage timed, and a table of the stages at
# the end (also in .cache/test-times.json; docs/development.md, "Tests").
#
#   1. tools, lint, the unit tests in two workers (pytest-xdist), the images
#      built and run with Docker;
#   2. two lanes at once, on systems that share nothing:
#        cluster lane  the real local control plane (make test-cluster): the
#                      cluster, e2e and fault tests, torn down after; then
#                      the tests marked compat on a 1.35 one (make test-compat);
#        KinD lane     one KinD cluster ($KIND_CLUSTER): make kind-up,
#                      make argocd-e2e, make e2e, make report, the KinD tests;
#   3. the GitLab pipeline on that same KinD cluster and its Argo CD
#      (tests/pipeline): a release tag whose first test job fails on purpose
#      (no release), then a release tag that passes and deploys. Its test jobs
#      run TEST_SELECTION=pipeline_sample: the suites passed above already, in
#      this run, on this commit; the jobs prove they run them;
#   4. make kind-down, the last KinD test: nothing left behind.
#
# TEST_LANES=1 runs the two lanes one after the other (to compare). Without
# Go or Docker the stages that need them say what to install and are skipped
# (under CI=true they fail). Everything a stage starts (clusters, a Docker
# engine this run started) is stopped at the end, also after a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
PYTEST=.venv/bin/pytest
export KIND_CLUSTER=gpu-scheduler-kind-test
export KIND_KUBECONFIG="$PWD/.cache/kind/$KIND_CLUSTER.kubeconfig"
# The pipeline stage's registry; the KinD cluster is made to pull from it.
export PIPELINE_REGISTRY_PORT="${PIPELINE_REGISTRY_PORT:-5001}"
stages_reset

# New files in the work tree (neither tracked nor ignored) are named at the
# next stage, so the stage that wrote into the checkout can be found: CI once
# met one named with random bytes, origin unknown. git quotes such names.
untracked() { git ls-files --others --exclude-standard 2>/dev/null || true; }
seen_untracked="$(untracked)"
report_new_files() {
  local now new
  now="$(untracked)"
  new="$(comm -13 <(sort <<<"$seen_untracked") <(sort <<<"$now") | sed '/^$/d')"
  [[ -z "$new" ]] || printf 'warning: the stages before left new files in the work tree:\n%s\n' "$new" >&2
  seen_untracked="$now"
}

# Whatever a stage starts is stopped at the end, also after a failure; the
# stage table is printed either way.
cleanups=()
cleanup() {
  local status=$? i
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do eval "${cleanups[i]}" || true; done
  stage_table
  ((status == 0)) && printf '\nall tests passed\n' || printf '\nmake test FAILED (exit %d): the stage table above names the stage\n' "$status"
}
trap cleanup EXIT

stage tools "tools: .venv, kubectl and helm, lint tools" make --no-print-directory install tools lint-tools

# Only an engine this run started is stopped at the end: one that was already
# up may be running other people's containers.
engine_was_up=false
docker info >/dev/null 2>&1 && engine_was_up=true
$engine_was_up || cleanups+=('if bash scripts/docker-engine.sh status 2>&1 | grep -q "started by"; then echo "==> stopping the Docker engine this run started"; bash scripts/docker-engine.sh stop; fi')

# Downloads beside lint and the unit tests, which use the cores but not the
# network (scripts/prefetch.sh): the Docker engine, the images' base and
# wheels for the images stage; every Go module for the builds after it.
declare -A prefetching=()
for part in images go; do
  set -m # a process group of its own, stopped whole if the run ends first
  bash scripts/prefetch.sh "$part" >"$STAGES_DIR/prefetch-$part.log" 2>&1 &
  prefetching[$part]=$!
  set +m
  cleanups+=("kill -- -${prefetching[$part]} 2>/dev/null || true")
done
# prefetched PART: waits for that part, then shows what it did.
prefetched() {
  wait "${prefetching[$1]}" || true
  sed "s/^/[prefetch $1] /" "$STAGES_DIR/prefetch-$1.log"
}

stage lint "lint" make --no-print-directory lint
report_new_files
# The alerts' unit tests need promtool: on a new machine without GitHub it is built
# from its Go module (about 4 min on 2 cores, once per machine), a stage of its own
# so that its cost shows in the table instead of inside the unit tests'.
stage promtool "promtool (make promtool: the release, else built from its Go module once per machine)" \
  make --no-print-directory promtool
stage unit "unit tests in two workers (make test-unit: no cluster, no Docker)" make --no-print-directory test-unit
report_new_files

# The images as users build and run them. Under CI=true the engine must come
# up (scripts/docker-engine.sh installs and starts it when root); elsewhere,
# without one, the image tests are skipped with a message naming what to install.
prefetched images
docker_runs=false
if bash scripts/docker-engine.sh ensure; then
  docker_runs=true
elif [ "${CI:-}" = "true" ]; then
  exit 1
fi
images() {
  if $docker_runs; then bash scripts/images.sh build >/dev/null; fi
  make --no-print-directory test-images
}
stage images "images: make images, the image tests" images
report_new_files

# Built once, before the lanes: the cluster lane runs it, and the KinD node
# image (when it must be assembled here) takes its binaries instead of
# compiling Kubernetes a second time at the same moment.
prefetched go
if command -v go >/dev/null 2>&1; then
  stage control-plane "the local control plane's binaries (make control-plane: built once per machine, linked after)" \
    make --no-print-directory control-plane
fi

# ---- the cluster lane: the local control plane --------------------------------
# `make test` always uses its own local cluster, never a KUBECONFIG that may
# point at a real cluster (scripts/test-cluster.sh sets its own).
cluster_lane() {
  if ! command -v go >/dev/null 2>&1 && [ "${CI:-}" != "true" ]; then
    echo "Go is not installed, so the local control plane cannot be built."
    echo "Install Go 1.26+ (https://go.dev/dl/) and run 'make test' again; these tests are skipped:"
    KUBECONFIG="$PWD/.cache/local-cluster/kubeconfig" stage cluster "cluster, e2e and fault tests (no Go: skipped)" \
      $PYTEST -m "cluster or e2e or faults"
    return
  fi
  stage cluster "cluster lane: the local control plane, its cluster, e2e and fault tests" \
    make --no-print-directory test-cluster
  # The oldest Kubernetes the charts accept: a second local control plane of
  # 1.35 (built once per machine), the tests marked compat against it.
  stage compat "cluster lane: make test-compat (the compat tests on a local control plane of Kubernetes 1.35)" \
    make --no-print-directory test-compat
  # The README's first command, as a user runs it: its own local cluster, up and
  # down again, PASS or exit 1. The lane ends long before the KinD lane does.
  stage demo "cluster lane: make demo (the task on a fresh local control plane, PASS/FAIL)" \
    make --no-print-directory demo
}

# ---- the KinD lane ------------------------------------------------------------
# One cluster, never a user's `make kind-up` cluster: `make argocd-e2e`, `make
# e2e` and `make report` install into it, the KinD tests run on it, then the
# pipeline stage's jobs use it and its Argo CD, and the last test proves that
# `make kind-down` removes everything. Whether the docker network `kind`
# existed before is read from Docker here, before `kind-up`, for that test.
kind_lane() {
  # kind's nodes restart with the Docker engine (restart policy on-failure:1),
  # so the clusters of a run that was killed come back with it and share this
  # machine's cores and inotify instances with this run's. CI once failed so:
  # the kubelets of its new cluster could not start ('too many open files').
  stage leftovers "KinD: what an interrupted run left behind (make kind-down, make pipeline-down)" \
    make --no-print-directory kind-down pipeline-down PIPELINE_CLUSTER="$KIND_CLUSTER"
  KIND_TEST_NETWORK_EXISTED_BEFORE=0
  docker network inspect kind >/dev/null 2>&1 && KIND_TEST_NETWORK_EXISTED_BEFORE=1
  export KIND_TEST_NETWORK_EXISTED_BEFORE
  # With the registry the pipeline stage starts later (nothing answers there
  # yet: containerd asks it only when a pod names it).
  stage kind-up "KinD: make kind-up (cluster $KIND_CLUSTER, its nodes pulling from 127.0.0.1:$PIPELINE_REGISTRY_PORT too)" \
    make --no-print-directory kind-up KIND_REGISTRY="127.0.0.1:$PIPELINE_REGISTRY_PORT"
  # Before make e2e: it leaves its helm releases of our charts installed,
  # which Argo CD would have to take over. The Argo CD tests remove their
  # Applications and what they deployed; Argo CD itself stays for the pipeline.
  stage argocd-e2e "KinD: make argocd-e2e (Argo CD in the cluster syncs the released charts from an OCI registry)" \
    make --no-print-directory argocd-e2e
  stage kind-e2e "KinD: make e2e (images loaded, both charts installed with their hooks, the e2e suite)" \
    make --no-print-directory e2e
  stage report "KinD: make report (the real logs of the check pods on node3 and node4)" \
    make --no-print-directory report REPORT_CLUSTER=kind
  # KIND_TEST_KEEP_CLUSTER: the pipeline stage uses the cluster next.
  stage kind-tests "KinD: the KinD tests on the same cluster (make kind-down comes last)" \
    env KIND_TEST_KEEP_CLUSTER=1 $PYTEST -m kind tests/kind --deselect "$KIND_DOWN_TEST"
}
KIND_DOWN_TEST=tests/kind/test_kind_cluster.py::test_kind_down_removes_containers_volumes_network_and_kubeconfig

# lane_in_background NAME FUNCTION: FUNCTION's output goes to a log of its
# own, shown whole when it ends; meanwhile a line every minute says where it is.
lane_pid=""
lane_in_background() {
  local name="$1" function="$2" log="$STAGES_DIR/$1.log"
  # A process group of its own (job control on for this one job), so that
  # a failure of the other lane stops it with everything it started.
  set -m
  "$function" >"$log" 2>&1 &
  lane_pid=$!
  set +m
  cleanups+=("kill -- -$lane_pid 2>/dev/null && echo '==> stopped the $name lane'")
  (
    while kill -0 "$lane_pid" 2>/dev/null; do
      sleep 60
      kill -0 "$lane_pid" 2>/dev/null &&
        printf '[%s lane, %ds] %s\n' "$name" $((SECONDS - STAGES_STARTED)) "$(tail -c 2000 "$log" | tr '\r' '\n' | grep -v '^\s*$' | tail -n1 | cut -c1-150)"
    done
  ) &
}
# wait_lane NAME: until the background lane ends; its log; its exit status.
wait_lane() {
  local name="$1" status=0
  wait "$lane_pid" || status=$?
  printf '\n==> the %s lane, as it ran beside the other (%s)\n' "$name" "$STAGES_DIR/$name.log"
  cat "$STAGES_DIR/$name.log"
  return "$status"
}

if ! $docker_runs; then
  cluster_lane
  report_new_files
  echo "==> KinD and the pipeline: no Docker engine answers, so they are skipped"
  echo "Install Docker (https://docs.docker.com/engine/install/) and run 'make test' again for make kind-up, make argocd-e2e, make e2e, the KinD tests and the pipeline."
  stage kind "KinD, Argo CD and pipeline tests (no Docker: skipped)" \
    $PYTEST -m "kind or argocd or pipeline" tests/kind tests/argocd tests/pipeline
  exit 0
fi

cleanups+=('echo "==> tearing the KinD cluster down"; make --no-print-directory kind-down')
# The cluster lane's own trap stops the local control plane; this once more,
# for a lane that was killed before its trap could.
cleanups+=('bash scripts/local-down.sh >/dev/null 2>&1')
if [[ "${TEST_LANES:-2}" == 1 ]]; then
  cluster_lane
  kind_lane
else
  lane_in_background cluster cluster_lane
  kind_lane
  wait_lane cluster
fi
report_new_files

# ---- the pipeline stage, on the KinD lane's cluster ----------------------------
# After both lanes: its test-cluster job starts the local control plane the
# cluster lane used. Registry and git daemon are stopped again by each run.
export PIPELINE_CLUSTER="$KIND_CLUSTER"
cleanups+=('echo "==> stopping what make pipeline left"; bash scripts/pipeline.sh down')
stage pipeline-blocked "pipeline: a release tag whose first test job fails on purpose (tests/pipeline/test_blocked_release.py)" \
  $PYTEST -s -m pipeline tests/pipeline/test_blocked_release.py
stage pipeline-release "pipeline: a release tag, lint to deploy through Argo CD (tests/pipeline/test_pipeline.py)" \
  $PYTEST -s -m pipeline tests/pipeline/test_pipeline.py
report_new_files

stage kind-down "KinD: make kind-down leaves nothing behind (the last KinD test)" $PYTEST -m kind "$KIND_DOWN_TEST"
report_new_files
