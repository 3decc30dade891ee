"""Argo CD deploys both released charts, in order, from an OCI registry: per cluster, with values from
the platform's own repository, and on a commit or an annotation alone.

Argo CD runs in the KinD cluster (built here from its Go modules); argocd/
comes from `kubectl apply -k` of this checkout, unedited but for the project's
own URL (conftest.py). The charts come from a registry they were pushed to as
the release job pushes them; the values from a repository that holds nothing
of this checkout. The cluster is picked by the labels of its cluster Secret
and told what to deploy by its annotations, as a platform's are. The oracles are the cluster's
own records (object UIDs and resourceVersions, the job controller's events,
the pods' specs and their containers' logs) and Argo CD's status of the
Applications and the ApplicationSet; none is a log line of ours.

The tests share one deployment and run in file order: the second sync, the
commits to git and the opt-out of the check come after the checks of the
first rollout.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time

import pytest
import yaml
from e2e.charts import helm_template
from e2e.cluster import env_seen
from gpu_scheduler.placement import DEVICES_FIELD_PATH

from .conftest import (
    APPS,
    APPSET,
    ARGOCD_NAMESPACE,
    CHARTS,
    CHARTS_PATH,
    CHECK,
    CHECK_APP,
    CLUSTER_LABELS,
    CLUSTER_NAME,
    INSTALL_TIMEOUT,
    NAMESPACES,
    ROOT_APP,
    SCHEDULER,
    SCHEDULER_APP,
    SYNC_TIMEOUT,
    VALUES_PATH,
    Kube,
    annotate_args,
    deployed_objects,
    describe,
    our_cluster_objects,
    progress,
    push_charts,
    rolled_out,
    root_synced,
    script,
    wait_for,
)

pytestmark = [pytest.mark.argocd, pytest.mark.timeout(INSTALL_TIMEOUT + 6 * SYNC_TIMEOUT)]

CHECK_VALUES = "charts/gpu-scheduler-check/values.yaml"
# This cluster's own values for the check chart in the platform's repository, which the
# ApplicationSet adds when it exists.
CLUSTER_CHECK_VALUES = f"{VALUES_PATH}/{CLUSTER_NAME}/values-{CHECK}.yaml"
TLS_SECRET = "gpu-scheduler-webhook-tls"
WEBHOOK_CONFIGURATIONS = ("mutatingwebhookconfiguration", "validatingwebhookconfiguration")
ROLLING_SYNC = {"username": "applicationset-controller", "automated": True}
# What the snapshot of "everything we deployed" lists in our namespaces.
NAMESPACED_KINDS = (
    "pods",
    "services",
    "serviceaccounts",
    "secrets",
    "configmaps",
    "deployments.apps",
    "replicasets.apps",
    "statefulsets.apps",
    "controllerrevisions.apps",
    "cronjobs.batch",
    "poddisruptionbudgets.policy",
    "resourcequotas",
    "roles.rbac.authorization.k8s.io",
    "rolebindings.rbac.authorization.k8s.io",
    "networkpolicies.networking.k8s.io",
)
# Objects without a status: any write, even of the same content by a tool
# that does not skip no-ops, would show in their resourceVersion.
STATUSLESS = {
    "Secret",
    "ConfigMap",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ClusterRole",
    "ClusterRoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
}


def expected_placements(values_file) -> dict[str, tuple[str, str]]:
    """pod name -> (node, CUDA_VISIBLE_DEVICES), read from the check chart's map as served."""
    placements = {}
    for line in scheduling_map(values_file).splitlines():
        if line.strip() and not line.strip().startswith("#"):
            index, rest = line.strip().split("=", 1)
            node, devices = rest.split(":", 1)
            placements[f"gpu-scheduler-check-{int(index)}"] = (node.strip(), devices.replace(" ", ""))
    return placements


def scheduling_map(values_file) -> str:
    return yaml.safe_load(values_file.read_text())["schedulingMap"]


def check_pods(kube: Kube) -> dict[str, dict]:
    pods = kube.items("-n", NAMESPACES[CHECK], "pods", "-l", "app.kubernetes.io/name=gpu-scheduler-check")
    return {pod["metadata"]["name"]: pod for pod in pods}


def logged_placement(kube: Kube, pod: str) -> dict[str, str] | None:
    """The key=value fields of the check container's last report (its real stdout), or None before the first."""
    logs = kube.kubectl("logs", "-n", NAMESPACES[CHECK], pod, "-c", "check", "--tail=5")
    reports = [line for line in logs.stdout.splitlines() if " pod=" in line]
    if logs.returncode != 0 or not reports:
        return None
    return dict(re.findall(r"(\S+?)=(\S+)", reports[-1]))


def placement_problems(kube: Kube, expected: dict[str, tuple[str, str]]) -> list[str]:
    """Every way the running check pods differ from the map: node, what the spec's env gives each
    container (a literal, or the bind's annotation through a fieldRef), the container's report."""
    pods = check_pods(kube)
    problems = [f"{name}: missing" for name in expected if name not in pods]
    for name, (node, devices) in expected.items():
        pod = pods.get(name)
        if pod is None:
            continue
        if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            problems.append(f"{name}: phase {pod['status'].get('phase')}")
            continue
        if pod["spec"].get("nodeName") != node:
            problems.append(f"{name}: on {pod['spec'].get('nodeName')}, the map says {node}")
        for container in pod["spec"]["containers"]:
            # What the container sees: a literal, or the devices the bind wrote for its fieldRef.
            seen = env_seen(pod, container).get("CUDA_VISIBLE_DEVICES")
            if seen != devices:
                problems.append(f"{name}/{container['name']}: CUDA_VISIBLE_DEVICES {seen!r}")
        report = logged_placement(kube, name)
        wanted = {"node": node, "CUDA_VISIBLE_DEVICES": devices, "match": "true"}
        if report is None or {key: report.get(key) for key in wanted} != wanted:
            problems.append(f"{name}: its container reports {report}, expected {wanted}")
    return problems


def wait_for_new_check_pods(kube: Kube, expected: dict, old_pods: dict[str, str], how: str) -> None:
    """Until every check pod is a new one (not of `old_pods`: name -> uid) placed as `expected`.
    The StatefulSet replaces its pods one by one once synced: a minute or two."""
    wait_for(
        f"the check pods re-created {how}",
        lambda: (
            not placement_problems(kube, expected)
            and all(pod["metadata"]["uid"] != old_pods.get(name) for name, pod in check_pods(kube).items())
        ),
        300,
        explain=lambda: "\n".join(placement_problems(kube, expected)),
    )


def hooks_of(app: dict) -> dict[tuple[str, str], dict]:
    """(hook type, name) -> the hook's entry in the Application's last sync result."""
    resources = app["status"]["operationState"]["syncResult"]["resources"]
    return {(r["hookType"], r["name"]): r for r in resources if r.get("hookType")}


def is_hook(obj: dict) -> bool:
    annotations = obj["metadata"].get("annotations") or {}
    owners = {owner["kind"] for owner in obj["metadata"].get("ownerReferences") or []}
    return "helm.sh/hook" in annotations or "argocd.argoproj.io/hook" in annotations or "Job" in owners


def content_digest(obj: dict) -> str:
    """A hash of what a sync could change: metadata (labels, annotations, owners), spec, data; not status."""
    kept = {key: value for key, value in obj.items() if key != "status"}
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")}
    kept["metadata"] = meta
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def snapshot(kube: Kube) -> dict[str, dict]:
    """Every object the two Applications deployed (hooks and their Jobs' pods aside), by kind/namespace/name."""
    objects = []
    for namespace in NAMESPACES.values():
        objects += kube.items("-n", namespace, ",".join(NAMESPACED_KINDS))
    for kind, name in our_cluster_objects():
        found = kube.kubectl("get", kind, name, "-o", "json")
        if found.returncode == 0:
            objects.append(json.loads(found.stdout))
    found = {}
    for obj in objects:
        if is_hook(obj):
            continue
        meta = obj["metadata"]
        found[f"{obj['kind']}/{meta.get('namespace', '-')}/{meta['name']}"] = {
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "digest": content_digest(obj),
        }
    return found


def test_certificate_hooks_ran_under_argocd_and_the_webhook_trusts_their_ca(deployment):
    kube = deployment.kube
    namespace = NAMESPACES[SCHEDULER]
    hooks = hooks_of(deployment.first[SCHEDULER_APP])

    # Argo CD ran the charts' Helm hooks as its own PreSync and PostSync hooks.
    assert hooks[("PreSync", "gpu-scheduler-certs-create")]["hookPhase"] == "Succeeded", hooks
    assert hooks[("PostSync", "gpu-scheduler-certs-patch")]["hookPhase"] == "Succeeded", hooks
    # The job controller's own record: both Jobs ran to completion in the cluster.
    events = kube.items("-n", namespace, "events")
    jobs = [e for e in events if e["involvedObject"]["kind"] == "Job"]
    completed = {e["involvedObject"]["name"] for e in jobs if e["reason"] == "Completed"}
    assert {"gpu-scheduler-certs-create", "gpu-scheduler-certs-patch"} <= completed, completed
    # The Secret they made holds the CA both webhook configurations now trust.
    secret = kube.get("-n", namespace, "secret", TLS_SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert ca.startswith(b"-----BEGIN CERTIFICATE-----")
    for kind in WEBHOOK_CONFIGURATIONS:
        configuration = kube.get(kind, "gpu-scheduler")
        bundles = {base64.b64decode(w["clientConfig"]["caBundle"]) for w in configuration["webhooks"]}
        assert bundles == {ca}, f"{kind} gpu-scheduler: caBundle is not the CA of Secret {TLS_SECRET}"


def test_the_labelled_cluster_gets_both_released_charts_from_the_registry_with_the_platforms_values(deployment):
    version = deployment.annotations["gpu-scheduler/chart-version"]
    values_commit = deployment.platform.head()
    assert set(deployment.kube.applications()) == {SCHEDULER_APP, CHECK_APP, ROOT_APP}
    for chart, name in APPS.items():
        app = deployment.first[name]
        owners = [(o["kind"], o["name"]) for o in app["metadata"]["ownerReferences"]]
        assert owners == [("ApplicationSet", APPSET)], owners
        destination = {"server": "https://kubernetes.default.svc", "namespace": NAMESPACES[chart]}
        assert app["spec"]["destination"] == destination
        # The released chart from the registry the annotation names (oci:// dropped: Argo CD's
        # Helm OCI source has no scheme), this cluster's values file from the platform's repository.
        charts, values = app["spec"]["sources"]
        assert (charts["repoURL"], charts["chart"], charts["targetRevision"]) == (
            f"{deployment.registry.host}/{CHARTS_PATH}",
            chart,
            version,
        )
        assert "path" not in charts
        assert charts["helm"]["valueFiles"] == [f"$values/{VALUES_PATH}/{CLUSTER_NAME}/values-{chart}.yaml"]
        assert (values["repoURL"], values["targetRevision"], values["ref"]) == (
            deployment.platform_url,
            "HEAD",
            "values",
        )
        status = app["status"]
        assert (status["sync"]["status"], status["sync"]["revisions"]) == ("Synced", [version, values_commit]), name
        assert status["health"]["status"] == "Healthy", name
        assert status["operationState"]["phase"] == "Succeeded", name
        # The documented CLI sees the same.
        shown = json.loads(deployment.argocd.ok("app", "get", name, "-o", "json"))
        assert (shown["status"]["sync"]["status"], shown["status"]["health"]["status"]) == ("Synced", "Healthy")


def argocd_events(kube: Kube, app: dict) -> list[tuple[int, str]]:
    """(nanoseconds since the epoch, message) of the Events Argo CD recorded about `app`, oldest first.

    Argo CD names each Event <application>.<its UnixNano time in hex>: finer
    than the Events' and the operations' timestamps (whole seconds). Only
    Events about this Application object (its UID): an earlier run's stay for
    an hour.
    """
    name, uid = app["metadata"]["name"], app["metadata"]["uid"]
    found = []
    for event in kube.items("-n", ARGOCD_NAMESPACE, "events", "--field-selector", f"involvedObject.name={name}"):
        if event["involvedObject"].get("uid") != uid:
            continue
        prefix, _, stamp = event["metadata"]["name"].rpartition(".")
        assert prefix == name and re.fullmatch(r"[0-9a-f]+", stamp), f"Argo CD event name: {event['metadata']}"
        found.append((int(stamp, 16), event["message"]))
    return sorted(found)


def status_at(events: list[tuple[int, str]], moment: int, kind: str) -> str | None:
    """The status the last "Updated <kind> status: A -> B" Event before `moment` recorded (B); kind: health or sync."""
    changes = [re.fullmatch(rf"Updated {kind} status: \w* -> (\w+)", message) for ns, message in events if ns < moment]
    changes = [change.group(1) for change in changes if change]
    return changes[-1] if changes else None


def test_rolling_sync_synced_the_check_only_once_gpu_scheduler_was_healthy(deployment):
    scheduler = deployment.first[SCHEDULER_APP]
    check = deployment.first[CHECK_APP]
    served = f"{deployment.annotations['gpu-scheduler/chart-version']},{deployment.platform.head()}"

    # Every sync of both was RollingSync's (the ApplicationSet controller's), not ours.
    for app in (scheduler, check):
        assert app["status"]["operationState"]["operation"]["initiatedBy"] == ROLLING_SYNC
    # Argo CD's own Events: gpu-scheduler was Synced and Healthy before
    # anything of the check existed (the check's first health change away
    # from Missing is its sync creating its objects). That is what RollingSync
    # waits for (Argo CD v3.5.7, applicationset/progressivesync: a step's
    # Application is done once Healthy and Synced), not for the end of its
    # sync operation: the PostSync hook that writes the webhooks' caBundle may
    # still run (docs/install.md says what the check's sync meets then).
    scheduler_events = argocd_events(deployment.kube, scheduler)
    check_events = argocd_events(deployment.kube, check)
    # Two sources (the chart's version, the values repository): Argo CD names both revisions.
    synced = [ns for ns, message in scheduler_events if message == f"Sync operation to {served} succeeded"]
    created = [
        ns for ns, message in check_events if re.fullmatch(r"Updated health status: \w* -> (?!Missing$)\w+", message)
    ]
    assert synced, f"no Event of a successful sync of gpu-scheduler: {scheduler_events}"
    assert created, f"no Event of gpu-scheduler-check leaving Missing: {check_events}"
    state = {kind: status_at(scheduler_events, created[0], kind) for kind in ("sync", "health")}
    assert state == {"sync": "Synced", "health": "Healthy"}, (
        f"gpu-scheduler-check's objects appeared ({created[0]} ns) while gpu-scheduler was {state}: "
        f"{scheduler_events} / {check_events}"
    )
    # The ApplicationSet's own account: two steps, in this order, both done.
    statuses = {s["application"]: s for s in deployment.first_appset["status"]["applicationStatus"]}
    assert {name: (s["step"], s["status"]) for name, s in statuses.items()} == {
        SCHEDULER_APP: ("1", "Healthy"),
        CHECK_APP: ("2", "Healthy"),
    }


def test_check_pods_run_where_the_map_says_with_their_devices(deployment):
    expected = expected_placements(deployment.repo.work / CHECK_VALUES)
    assert len(expected) == 5

    # The first report of each check container can be up to one interval (10 s) away.
    wait_for(
        "every check pod on its node with its CUDA_VISIBLE_DEVICES, by spec and by its own report",
        lambda: not placement_problems(deployment.kube, expected),
        120,
        explain=lambda: "\n".join(placement_problems(deployment.kube, expected)),
    )
    for pod in check_pods(deployment.kube).values():
        assert pod["spec"]["schedulerName"] == "gpu-scheduler"


def test_a_second_sync_with_nothing_changed_changes_nothing(deployment):
    kube, argocd = deployment.kube, deployment.argocd
    before = snapshot(kube)
    operations = {name: kube.application(name)["status"]["operationState"]["startedAt"] for name in APPS.values()}

    # The README's commands.
    argocd.ok("app", "sync", SCHEDULER_APP, "--timeout", str(SYNC_TIMEOUT))
    argocd.ok("app", "wait", SCHEDULER_APP, "--health", "--timeout", str(SYNC_TIMEOUT))
    argocd.ok("app", "sync", CHECK_APP, "--timeout", str(SYNC_TIMEOUT))
    argocd.ok("app", "wait", CHECK_APP, "--health", "--timeout", str(SYNC_TIMEOUT))

    for name in APPS.values():
        app = kube.application(name)
        operation = app["status"]["operationState"]
        assert operation["startedAt"] != operations[name], f"{name}: no new sync"
        assert operation["phase"] == "Succeeded", operation
        assert operation["operation"]["initiatedBy"].get("automated") is not True, operation["operation"]
    # The certificate hooks ran again (and kept the Secret: below).
    hooks = hooks_of(kube.application(SCHEDULER_APP))
    assert {h["hookPhase"] for h in hooks.values()} == {"Succeeded"}, hooks
    after = snapshot(kube)
    assert set(after) == set(before), f"appeared: {set(after) - set(before)}; gone: {set(before) - set(after)}"
    recreated = [key for key in before if after[key]["uid"] != before[key]["uid"]]
    changed = [key for key in before if after[key]["digest"] != before[key]["digest"]]
    rewritten = [
        key
        for key in before
        if key.split("/")[0] in STATUSLESS and after[key]["resourceVersion"] != before[key]["resourceVersion"]
    ]
    assert not recreated, f"re-created by the second sync: {recreated}"
    assert not changed, f"changed by the second sync: {changed}"
    assert not rewritten, f"written again by the second sync: {rewritten}"
    assert f"Secret/{NAMESPACES[SCHEDULER]}/{TLS_SECRET}" in before


def test_a_commit_of_the_clusters_own_values_deploys_with_no_cli(deployment):
    """clusters/<cluster>/values-<chart>.yaml in the platform's repository, committed and pushed:
    nothing else. Argo CD notices the commit at its next poll (timeout.reconciliation, 20 s in our
    install)."""
    kube, repo = deployment.kube, deployment.platform
    chart_map = scheduling_map(deployment.repo.work / CHECK_VALUES)
    assert chart_map.count("\n4=node4:3\n") == 1, "the chart's map no longer has the line this test moves"
    values = repo.work / CLUSTER_CHECK_VALUES
    assert not values.exists(), f"{CLUSTER_CHECK_VALUES} is in the platform's repository: this test writes it"
    values.parent.mkdir(parents=True)
    values.write_text(yaml.safe_dump({"schedulingMap": chart_map.replace("\n4=node4:3\n", "\n4=node1:2\n")}))
    revision = repo.commit(f"{CLUSTER_NAME}: check pod 4 to node1, GPU 2")
    expected = expected_placements(values)
    assert expected["gpu-scheduler-check-4"] == ("node1", "2")
    old_pods = {name: pod["metadata"]["uid"] for name, pod in check_pods(kube).items()}

    started = time.monotonic()
    wait_for(
        f"both Applications Synced and Healthy at {revision[:12]}, with no CLI",
        lambda: rolled_out(kube, [deployment.annotations["gpu-scheduler/chart-version"], revision]),
        SYNC_TIMEOUT,
        explain=lambda: describe(kube),
    )
    seconds = deployment.seconds["commit to rollout"] = time.monotonic() - started
    progress(f"the committed values rolled out by RollingSync ({seconds:.0f}s after the commit)")
    check = kube.application(CHECK_APP)["status"]["operationState"]
    assert check["operation"]["initiatedBy"] == ROLLING_SYNC, "the change was not synced by RollingSync"
    assert check["syncResult"]["revisions"] == [deployment.annotations["gpu-scheduler/chart-version"], revision]
    wait_for_new_check_pods(kube, expected, old_pods, "on this cluster's map")
    assert check_pods(kube)["gpu-scheduler-check-4"]["spec"]["nodeName"] == "node1"


# ARGOCD_DRIFTED=1: the StatefulSet is edited by hand before Argo CD compares it again, a drift
# Argo CD must see: the test below then fails, as it must (its oracle seen failing).
DRIFTED = os.environ.get("ARGOCD_DRIFTED") == "1"
DRIFT = json.dumps([{"op": "replace", "path": "/spec/template/spec/containers/0/args/0", "value": "--interval=11"}])


def test_a_statefulset_given_its_entries_at_apply_stays_synced(deployment):
    """A workload written without CUDA_VISIBLE_DEVICES (the check chart with
    writeDeviceEntries: false) is stored with the bind entries by gpu-scheduler's admission,
    once, at apply; Argo CD, with the sync options argocd/ uses, keeps it Synced and does not
    sync it again, and its pods run with the devices the bind gave them."""
    kube, argocd, repo = deployment.kube, deployment.argocd, deployment.platform
    values = repo.work / CLUSTER_CHECK_VALUES
    assert values.exists(), f"{CLUSTER_CHECK_VALUES}: the test before this one writes it"
    cluster_values = yaml.safe_load(values.read_text())
    values.write_text(yaml.safe_dump({**cluster_values, "writeDeviceEntries": False}))
    revision = repo.commit(f"{CLUSTER_NAME}: the check leaves its device entries to admission")
    expected = expected_placements(values)
    old_pods = {name: pod["metadata"]["uid"] for name, pod in check_pods(kube).items()}

    # What Argo CD applies: the chart's template, without the entries.
    rendered = helm_template(CHECK, deployment.repo.work / CHARTS[CHECK], NAMESPACES[CHECK], "-f", str(values))
    (template,) = [doc["spec"]["template"] for doc in rendered if doc["kind"] == "StatefulSet"]
    rendered_env = template["spec"]["containers"][0]["env"]
    assert not [e for e in rendered_env if e["name"].startswith("CUDA_")], rendered_env

    wait_for(
        f"both Applications Synced and Healthy at {revision[:12]}",
        lambda: rolled_out(kube, [deployment.annotations["gpu-scheduler/chart-version"], revision]),
        SYNC_TIMEOUT,
        explain=lambda: describe(kube),
    )
    wait_for_new_check_pods(kube, expected, old_pods, "from the admitted template, each with its devices")
    # The stored template has what admission added, after the chart's own entries.
    statefulset = kube.get("-n", NAMESPACES[CHECK], "statefulset", CHECK)
    env = statefulset["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env][-2:] == ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"], env
    assert env[-2]["valueFrom"]["fieldRef"]["fieldPath"] == DEVICES_FIELD_PATH, env
    synced_at = kube.application(CHECK_APP)["status"]["operationState"]["startedAt"]
    if DRIFTED:
        # What the checks below must catch: a field the chart renders, changed by hand.
        kube.ok("-n", NAMESPACES[CHECK], "patch", "statefulset", CHECK, "--type=json", "-p", DRIFT)

    # Argo CD compares again from scratch (a hard refresh): still Synced, the StatefulSet too,
    # and over two reconciliation periods (20 s each) no sync is started by self-heal.
    argocd.ok("app", "get", CHECK_APP, "--hard-refresh")
    time.sleep(45)
    app = kube.application(CHECK_APP)
    assert app["status"]["sync"]["status"] == "Synced", app["status"]["sync"]
    states = {(r["kind"], r["name"]): r.get("status") for r in app["status"]["resources"]}
    assert states[("StatefulSet", CHECK)] == "Synced", states
    assert app["status"]["operationState"]["startedAt"] == synced_at, app["status"]["operationState"]
    assert (
        kube.get("-n", NAMESPACES[CHECK], "statefulset", CHECK)["metadata"]["generation"]
        == (statefulset["metadata"]["generation"])
    )


def test_a_release_named_on_the_cluster_secret_deploys_from_the_registry(deployment, tmp_path):
    """A new release pushed by the release job, then its version set on the cluster Secret (the
    annotation gpu-scheduler/chart-version): nothing else. Both Applications sync it, in order;
    the root Application, which applies argocd/applicationset.yaml alone, has nothing to do."""
    kube, repo = deployment.kube, deployment.repo
    released = deployment.annotations["gpu-scheduler/chart-version"]
    major, minor, patch = map(int, released.split("."))
    version = push_charts(repo.work, deployment.registry, tmp_path, version=f"{major}.{minor}.{patch + 1}")
    deployment.annotations["gpu-scheduler/chart-version"] = version
    script("argocd.sh", "in-cluster", *annotate_args(deployment.annotations), *CLUSTER_LABELS)

    started = time.monotonic()
    _, apps = wait_for(
        f"both Applications Synced and Healthy at chart {version}",
        lambda: rolled_out(kube, [version, deployment.platform.head()]),
        SYNC_TIMEOUT,
        explain=lambda: describe(kube),
    )
    progress(f"chart {version} rolled out by RollingSync ({time.monotonic() - started:.0f}s after the annotation)")
    for name in APPS.values():
        assert apps[name]["spec"]["sources"][0]["targetRevision"] == version
        assert apps[name]["status"]["operationState"]["operation"]["initiatedBy"] == ROLLING_SYNC
    # What the cluster runs is the new chart's rendering (Helm's chart label names its version).
    for chart, namespace in NAMESPACES.items():
        workloads = kube.items("-n", namespace, "deployments.apps,statefulsets.apps")
        charts = {w["metadata"]["name"]: w["metadata"]["labels"].get("helm.sh/chart") for w in workloads}
        assert charts and set(charts.values()) == {f"{chart}-{version}"}, charts
    # The root Application applies the ApplicationSet and nothing else: no AppProject (opt-in,
    # argocd/appprojects-from-git.yaml), not itself.
    root = root_synced(kube, repo.head())
    assert root is not None, describe(kube)
    assert {(r["kind"], r["name"]) for r in root["status"]["resources"]} == {("ApplicationSet", APPSET)}


def test_a_cluster_without_the_check_label_loses_the_check_only(deployment):
    """The check is opt-in per cluster: its label removed, Argo CD deletes the check's
    Application and what it deployed; the scheduler's stays."""
    kube = deployment.kube
    scheduler_uid = kube.application(SCHEDULER_APP)["metadata"]["uid"]
    deploy_only = [label for label in CLUSTER_LABELS if not label.startswith("gpu-scheduler/check=")]
    script("argocd.sh", "in-cluster", *annotate_args(deployment.annotations), *deploy_only)

    wait_for(
        f"{CHECK_APP} and its pods deleted",
        lambda: CHECK_APP not in kube.applications() and not check_pods(kube),
        SYNC_TIMEOUT,
        explain=lambda: describe(kube),
    )
    left = [name for name in deployed_objects(kube) if name.startswith(f"{NAMESPACES[CHECK]}/")]
    assert not left, f"the check's objects outlived its Application: {left}"
    scheduler = kube.application(SCHEDULER_APP)
    assert scheduler["metadata"]["uid"] == scheduler_uid
    assert scheduler["status"]["health"]["status"] == "Healthy"


def test_a_labelled_cluster_without_its_chart_version_stops_the_applicationset_saying_so(deployment):
    """The annotation gpu-scheduler/chart-version removed: the ApplicationSet reports which
    cluster lacks which annotation and changes no Application (the one there stays as it was)."""
    kube = deployment.kube
    before = kube.application(SCHEDULER_APP)
    deploy_only = [label for label in CLUSTER_LABELS if not label.startswith("gpu-scheduler/check=")]
    missing = {key: value for key, value in deployment.annotations.items() if key != "gpu-scheduler/chart-version"}
    script("argocd.sh", "in-cluster", *annotate_args(missing), *deploy_only)
    try:

        def reported():
            appset = kube.get("-n", ARGOCD_NAMESPACE, "applicationsets.argoproj.io", APPSET)
            for condition in appset.get("status", {}).get("conditions", []):
                if condition["type"] == "ErrorOccurred" and condition["status"] == "True":
                    if "gpu-scheduler/chart-version" in condition["message"]:
                        return condition
            return None

        condition = wait_for(
            "the ApplicationSet to name the missing annotation", reported, 120, explain=lambda: describe(kube)
        )
        assert (
            f"cluster {CLUSTER_NAME}: its cluster Secret has no annotation gpu-scheduler/chart-version"
            in (condition["message"])
        ), condition
        after = kube.application(SCHEDULER_APP)
        assert after["metadata"]["uid"] == before["metadata"]["uid"]
        assert after["spec"] == before["spec"]
    finally:
        script("argocd.sh", "in-cluster", *annotate_args(deployment.annotations), *deploy_only)


def test_argocd_runs_in_the_cluster_with_progressive_syncs(deployment):
    kube = deployment.kube
    params = kube.get("-n", ARGOCD_NAMESPACE, "configmap", "argocd-cmd-params-cm")["data"]
    assert params["applicationsetcontroller.enable.progressive.syncs"] == "true"
    pods = kube.items("-n", ARGOCD_NAMESPACE, "pods")
    running = {p["metadata"]["labels"].get("app.kubernetes.io/name") for p in pods if p["status"]["phase"] == "Running"}
    assert {
        "argocd-application-controller",
        "argocd-applicationset-controller",
        "argocd-repo-server",
        "argocd-server",
        "argocd-redis",
    } <= running
    version = deployment.argocd.ok("version", "--short")
    assert "v3.5.7" in version, version
