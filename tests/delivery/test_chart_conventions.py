"""The values users of cert-manager's, ingress-nginx's or the GPU Operator's charts expect,
in both charts: ServiceAccounts, pod labels and annotations, extra arguments and
environment, topology spread, image digests, the disruption budgets' eviction policy,
and Chart.yaml's maintainers."""

from __future__ import annotations

import pytest
import yaml

from .conftest import (
    CHECK_CHART,
    SCHEDULER_CHART,
    SCHEDULER_NAMESPACE,
    TEST_REGISTRY,
    annotations,
    container_args,
    pod_spec,
    refused_render,
)

pytestmark = pytest.mark.delivery

SCHEDULER = "gpu-scheduler-scheduler"
WEBHOOK = "gpu-scheduler-webhook"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def template_metadata(owner: dict) -> dict:
    if owner["kind"] == "CronJob":
        return owner["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
    return owner["spec"]["template"]["metadata"]


def subjects_of(rendered, kind: str, name: str) -> list[tuple[str, str]]:
    return [(s["name"], s["namespace"]) for s in rendered.one(kind, name)["subjects"]]


def cert_pod_owners(rendered) -> list[dict]:
    return [o for o in rendered.of_kind("Job", "CronJob") if o["metadata"]["name"].startswith("gpu-scheduler-certs")]


# -- ServiceAccounts ------------------------------------------------------------


def test_service_accounts_take_their_names_and_annotations_from_values(render):
    rendered = render(
        SCHEDULER_CHART,
        "scheduler.serviceAccount.name=placer",
        "scheduler.serviceAccount.annotations.team=gpu",
        "webhook.serviceAccount.name=admission",
        "webhook.serviceAccount.annotations.team=gpu",
        "certs.serviceAccount.name=certifier",
        "certs.serviceAccount.annotations.team=gpu",
    )
    accounts = {doc["metadata"]["name"]: doc for doc in rendered.of_kind("ServiceAccount")}

    for name in ("placer", "admission", "certifier", "certifier-renewal"):
        assert annotations(accounts[name])["team"] == "gpu", name
    # The chart's own annotations stay: the hook account still exists before the hook Jobs.
    assert annotations(accounts["certifier"])["helm.sh/hook-weight"] == "-10"
    assert annotations(accounts["placer"])["argocd.argoproj.io/sync-wave"] == "2"
    assert pod_spec(rendered.one("Deployment", SCHEDULER))["serviceAccountName"] == "placer"
    assert pod_spec(rendered.one("Deployment", WEBHOOK))["serviceAccountName"] == "admission"
    assert pod_spec(rendered.one("Job", "gpu-scheduler-certs-create"))["serviceAccountName"] == "certifier"
    assert pod_spec(rendered.one("CronJob", "gpu-scheduler-certs-renewal"))["serviceAccountName"] == (
        "certifier-renewal"
    )
    assert subjects_of(rendered, "ClusterRoleBinding", SCHEDULER) == [("placer", SCHEDULER_NAMESPACE)]
    assert subjects_of(rendered, "RoleBinding", f"{SCHEDULER}-leader-election") == [("placer", SCHEDULER_NAMESPACE)]
    assert subjects_of(rendered, "RoleBinding", "gpu-scheduler-certs") == [("certifier", SCHEDULER_NAMESPACE)]
    assert subjects_of(rendered, "ClusterRoleBinding", "gpu-scheduler-certs-renewal") == [
        ("certifier-renewal", SCHEDULER_NAMESPACE)
    ]


def test_existing_service_accounts_are_bound_and_used_not_created(render):
    rendered = render(
        SCHEDULER_CHART,
        "scheduler.serviceAccount.create=false",
        "scheduler.serviceAccount.name=platform-scheduler",
        "webhook.serviceAccount.create=false",
        "webhook.serviceAccount.name=platform-webhook",
        "certs.serviceAccount.create=false",
        "certs.serviceAccount.name=platform-certs",
        "agent.serviceAccount.create=false",
        "agent.serviceAccount.name=platform-agent",
    )

    created = {doc["metadata"]["name"] for doc in rendered.of_kind("ServiceAccount")}
    # Only the `helm test` hook's own account is left.
    assert created == {"gpu-scheduler-smoke-test"}
    scheduler = pod_spec(rendered.one("Deployment", SCHEDULER))
    assert scheduler["serviceAccountName"] == "platform-scheduler"
    # It calls the API whatever the account says about mounting its token.
    assert scheduler["automountServiceAccountToken"] is True
    assert pod_spec(rendered.one("Deployment", WEBHOOK))["serviceAccountName"] == "platform-webhook"
    # The hook Jobs and the renewal CronJob run as the one account given.
    assert {pod_spec(o)["serviceAccountName"] for o in cert_pod_owners(rendered)} == {"platform-certs"}
    for kind, name in (("ClusterRoleBinding", SCHEDULER), ("RoleBinding", f"{SCHEDULER}-leader-election")):
        assert subjects_of(rendered, kind, name) == [("platform-scheduler", SCHEDULER_NAMESPACE)]
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        for name in ("gpu-scheduler-certs", "gpu-scheduler-certs-renewal"):
            assert subjects_of(rendered, kind, name) == [("platform-certs", SCHEDULER_NAMESPACE)]
    assert subjects_of(rendered, "ClusterRoleBinding", WEBHOOK) == [("platform-webhook", SCHEDULER_NAMESPACE)]
    agent = pod_spec(rendered.one("DaemonSet", "gpu-scheduler-agent"))
    assert agent["serviceAccountName"] == "platform-agent"
    assert agent["automountServiceAccountToken"] is True
    assert subjects_of(rendered, "ClusterRoleBinding", "gpu-scheduler-agent") == [
        ("platform-agent", SCHEDULER_NAMESPACE)
    ]


@pytest.mark.parametrize("component", ["scheduler", "webhook", "certs", "agent"])
def test_an_existing_service_account_must_be_named(helm, component):
    stderr = refused_render(helm, SCHEDULER_CHART, f"{component}.serviceAccount.create=false")

    assert f"{component}.serviceAccount.name is required when {component}.serviceAccount.create is false" in stderr


# -- pod labels and annotations, extra arguments and environment ------------------------


@pytest.mark.parametrize("component", ["scheduler", "webhook"])
def test_pod_labels_and_annotations_reach_the_pods_but_never_the_selector(render, component):
    rendered = render(
        SCHEDULER_CHART,
        f"{component}.podLabels.team=gpu",
        f"{component}.podLabels.app\\.kubernetes\\.io/component=other",
        f"{component}.podAnnotations.example\\.com/owner=gpu",
    )
    deployment = rendered.one("Deployment", f"gpu-scheduler-{component}")
    metadata = template_metadata(deployment)

    assert metadata["labels"]["team"] == "gpu"
    assert metadata["labels"]["app.kubernetes.io/component"] == component
    assert deployment["spec"]["selector"]["matchLabels"].items() <= metadata["labels"].items()
    assert metadata["annotations"] == {"example.com/owner": "gpu"}


def test_check_pods_take_labels_and_annotations_but_keep_their_map(render):
    rendered = render(
        CHECK_CHART,
        "podLabels.team=gpu",
        "podLabels.app\\.kubernetes\\.io/instance=other",
        "podAnnotations.example\\.com/owner=gpu",
        "podAnnotations.gpu-scheduling-map=0=elsewhere:0",
    )
    (sts,) = rendered.of_kind("StatefulSet")
    metadata = template_metadata(sts)

    assert metadata["labels"]["team"] == "gpu"
    assert sts["spec"]["selector"]["matchLabels"].items() <= metadata["labels"].items()
    assert metadata["annotations"]["example.com/owner"] == "gpu"
    assert metadata["annotations"]["gpu-scheduling-map"].startswith("0=node1:0,1\n")


@pytest.mark.parametrize("component", ["scheduler", "webhook"])
def test_extra_args_and_env_come_after_the_charts_own(render, component):
    rendered = render(
        SCHEDULER_CHART,
        f"{component}.extraArgs={{--log-level=debug,--extra=1}}",
        f"{component}.extraEnv[0].name=TZ",
        f"{component}.extraEnv[0].value=UTC",
    )
    (container,) = pod_spec(rendered.one("Deployment", f"gpu-scheduler-{component}"))["containers"]

    assert container["args"][0] == component
    # Last: a flag given again overrides the chart's (the last one wins).
    assert container["args"][-2:] == ["--log-level=debug", "--extra=1"]
    assert container["env"][-1] == {"name": "TZ", "value": "UTC"}


# -- topology spread -------------------------------------------------------------


@pytest.mark.parametrize(
    ("chart", "prefix", "name"),
    [
        (SCHEDULER_CHART, "scheduler.", SCHEDULER),
        (SCHEDULER_CHART, "webhook.", WEBHOOK),
        (CHECK_CHART, "", "gpu-scheduler-check"),
    ],
)
def test_topology_spread_constraints_select_the_components_own_pods_unless_told(render, chart, prefix, name):
    key = f"{prefix}topologySpreadConstraints"
    rendered = render(
        chart,
        f"{key}[0].maxSkew=1",
        f"{key}[0].topologyKey=topology.kubernetes.io/zone",
        f"{key}[0].whenUnsatisfiable=ScheduleAnyway",
        f"{key}[1].maxSkew=2",
        f"{key}[1].topologyKey=kubernetes.io/hostname",
        f"{key}[1].whenUnsatisfiable=DoNotSchedule",
        f"{key}[1].labelSelector.matchLabels.team=gpu",
    )
    (owner,) = [o for o in rendered.of_kind("Deployment", "StatefulSet") if o["metadata"]["name"] == name]
    zone, host = pod_spec(owner)["topologySpreadConstraints"]

    assert zone == {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": owner["spec"]["selector"],
    }
    assert host["labelSelector"] == {"matchLabels": {"team": "gpu"}}
    assert "topologySpreadConstraints" not in pod_spec(render(chart).one(owner["kind"], name))


# -- the image ---------------------------------------------------------------------


@pytest.mark.parametrize("chart", [SCHEDULER_CHART, CHECK_CHART], ids=lambda c: c.name)
def test_an_image_digest_pins_every_container_and_the_tag_is_ignored(render, chart):
    rendered = render(chart, f"image.digest={DIGEST}", "image.tag=0.0.9")
    repository = "gpu-scheduler-check" if chart == CHECK_CHART else "gpu-scheduler"

    for owner in rendered.pod_owners():
        for container in pod_spec(owner)["containers"]:
            assert container["image"] == f"{TEST_REGISTRY}/{repository}@{DIGEST}", owner["metadata"]["name"]
    if chart == SCHEDULER_CHART:
        # The `helm test` probe runs the very same image.
        smoke = rendered.one("Pod", "gpu-scheduler-smoke-test")
        assert f"--image={TEST_REGISTRY}/gpu-scheduler@{DIGEST}" in container_args(smoke)


# -- disruption budgets ------------------------------------------------------------


def test_unhealthy_pod_eviction_policy_is_kubernetes_default_unless_set(render):
    default = render(SCHEDULER_CHART)
    chosen = render(
        SCHEDULER_CHART,
        "scheduler.podDisruptionBudget.unhealthyPodEvictionPolicy=AlwaysAllow",
        "webhook.podDisruptionBudget.unhealthyPodEvictionPolicy=IfHealthyBudget",
    )

    for budget in default.of_kind("PodDisruptionBudget"):
        assert "unhealthyPodEvictionPolicy" not in budget["spec"]
    assert chosen.one("PodDisruptionBudget", SCHEDULER)["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert chosen.one("PodDisruptionBudget", WEBHOOK)["spec"]["unhealthyPodEvictionPolicy"] == "IfHealthyBudget"


# -- commonLabels, commonAnnotations -----------------------------------------------------

COMMON = (
    "commonLabels.team=gpu-platform",
    "commonLabels.example\\.com/cost-centre=ml",
    "commonAnnotations.example\\.com/owner=gpu-platform@example.com",
)
COMMON_LABELS = {"team": "gpu-platform", "example.com/cost-centre": "ml"}
COMMON_ANNOTATIONS = {"example.com/owner": "gpu-platform@example.com"}
API_VERSIONS = (
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy",
)
# Between them every template renders: each certs.mode, the monitoring objects, the network
# policies, the admission policies (1.36+), the agent's policy, the quota, the helm test.
EVERY_OBJECT = [
    (
        (
            "metrics.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.grafanaDashboard.enabled=true",
            "monitoring.grafanaDashboard.annotations.grafana_folder=GPU",
            "networkPolicy.enabled=true",
            "scheduler.serviceAccount.annotations.a=b",
        ),
        API_VERSIONS,
    ),
    (("certs.mode=cert-manager",), ()),
    (("certs.mode=provided", "certs.existingSecret=tls"), ()),
]


@pytest.mark.parametrize(("sets", "api_versions"), EVERY_OBJECT, ids=["job", "cert-manager", "provided"])
def test_common_labels_and_annotations_reach_every_object_but_no_selector(render, sets, api_versions):
    rendered = render(SCHEDULER_CHART, *COMMON, *sets, api_versions=api_versions)
    assert len(rendered.docs) > 20

    for doc in rendered.docs:
        what = f"{doc['kind']} {doc['metadata']['name']}"
        assert COMMON_LABELS.items() <= doc["metadata"]["labels"].items(), what
        assert COMMON_ANNOTATIONS.items() <= annotations(doc).items(), what
    for owner in rendered.pod_owners():
        labels = (owner["metadata"] if owner["kind"] == "Pod" else template_metadata(owner))["labels"]
        assert COMMON_LABELS.items() <= labels.items(), owner["metadata"]["name"]
        # A selector is immutable: a label added later must never enter one.
        if owner["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            assert not COMMON_LABELS.keys() & owner["spec"]["selector"]["matchLabels"].keys()
    # The chart's own annotations are still there: waves, hooks, and a ServiceAccount's.
    assert annotations(rendered.one("Deployment", SCHEDULER))["argocd.argoproj.io/sync-wave"] == "2"
    assert all("helm.sh/hook" in annotations(job) for job in rendered.of_kind("Job"))
    if "scheduler.serviceAccount.annotations.a=b" in sets:
        assert annotations(rendered.one("ServiceAccount", SCHEDULER))["a"] == "b"
        assert annotations(rendered.one("ConfigMap", "gpu-scheduler-dashboard"))["grafana_folder"] == "GPU"


def test_without_common_values_no_object_gets_more(render):
    for doc in render(SCHEDULER_CHART).docs:
        assert not COMMON_LABELS.keys() & doc["metadata"]["labels"].keys()
        assert not COMMON_ANNOTATIONS.keys() & annotations(doc).keys()


@pytest.mark.parametrize(
    "assignment",
    [
        "commonLabels.app\\.kubernetes\\.io/name=other",
        "commonLabels.helm\\.sh/chart=x",
        "commonAnnotations.helm\\.sh/hook=pre-install",
        "commonAnnotations.argocd\\.argoproj\\.io/sync-wave=5",
        "commonAnnotations.cert-manager\\.io/inject-ca-from=a/b",
    ],
)
def test_common_values_cannot_replace_the_charts_own_keys(helm, assignment):
    # Would change what selects the pods, or the order of the install.
    stderr = refused_render(helm, SCHEDULER_CHART, assignment)
    key = assignment.split(".", 1)[1].split("=")[0].replace("\\", "")
    assert f"invalid propertyName '{key}'" in stderr, stderr


# -- the certificate Jobs' scheduling ---------------------------------------------------


def test_certificate_jobs_and_renewal_run_where_told(render):
    default = render(SCHEDULER_CHART)
    told = render(
        SCHEDULER_CHART,
        "certs.job.nodeSelector.pool=system",
        "certs.job.tolerations[0].key=dedicated",
        "certs.job.tolerations[0].operator=Exists",
        "certs.job.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "certs.job.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
        "certs.job.priorityClassName=platform-high",
    )

    # The pre-install and post-install hooks and the daily renewal: all three.
    assert len(cert_pod_owners(told)) == 3
    for owner in cert_pod_owners(default):
        assert not {"nodeSelector", "tolerations", "affinity", "priorityClassName"} & pod_spec(owner).keys()
    for owner in cert_pod_owners(told):
        spec = pod_spec(owner)
        assert spec["nodeSelector"] == {"pool": "system"}, owner["metadata"]["name"]
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert spec["priorityClassName"] == "platform-high"


def test_a_critical_class_for_the_certificate_jobs_is_counted_by_the_quota(render):
    def quota_pods(*sets):
        quotas = render(SCHEDULER_CHART, *sets).of_kind("ResourceQuota")
        return int(quotas[0]["spec"]["hard"]["pods"]) if quotas else 0

    assert quota_pods("certs.job.priorityClassName=system-cluster-critical") == quota_pods() + 2
    # Scheduler and webhook of another class: the quota exists for the certificate Jobs alone.
    alone = ("scheduler.priorityClassName=x", "webhook.priorityClassName=x")
    assert quota_pods(*alone) == 0
    assert quota_pods(*alone, "certs.job.priorityClassName=system-node-critical") == 2


# -- probes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("component", "port", "scheme"), [("scheduler", "metrics", None), ("webhook", "https", "HTTPS")]
)
def test_probes_are_the_charts_unless_told(render, component, port, scheme):
    name = f"gpu-scheduler-{component}"
    default = pod_spec(render(SCHEDULER_CHART).one("Deployment", name))["containers"][0]
    told = pod_spec(
        render(
            SCHEDULER_CHART,
            f"{component}.livenessProbe.periodSeconds=30",
            f"{component}.readinessProbe.timeoutSeconds=3",
            f"{component}.startupProbe.httpGet.path=/healthz",
            f"{component}.startupProbe.httpGet.port={port}",
            f"{component}.startupProbe.failureThreshold=30",
        ).one("Deployment", name)
    )["containers"][0]

    get = {"path": "/healthz", "port": port} | ({"scheme": scheme} if scheme else {})
    assert default["livenessProbe"] == {"httpGet": get, "periodSeconds": 10, "failureThreshold": 3}
    assert default["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert "startupProbe" not in default
    # Helm merges maps: one timing changed keeps the handler and the other timings.
    assert told["livenessProbe"] == default["livenessProbe"] | {"periodSeconds": 30}
    assert told["readinessProbe"] == default["readinessProbe"] | {"timeoutSeconds": 3}
    assert told["startupProbe"] == {"httpGet": {"path": "/healthz", "port": port}, "failureThreshold": 30}


def test_a_probe_without_a_handler_or_with_two_is_refused(helm):
    stderr = refused_render(helm, SCHEDULER_CHART, "scheduler.startupProbe.periodSeconds=5")
    assert "startupProbe" in stderr, stderr
    stderr = refused_render(helm, SCHEDULER_CHART, "webhook.livenessProbe.tcpSocket.port=8443")
    assert "livenessProbe" in stderr, stderr


# -- global.imageRegistry -----------------------------------------------------------------


@pytest.mark.parametrize("chart", [SCHEDULER_CHART, CHECK_CHART], ids=lambda c: c.name)
def test_a_parent_charts_global_registry_wins_over_image_registry(render, chart):
    # The placeholder image.registry (refused alone) is no matter once the parent names one.
    rendered = render(
        chart,
        "image.registry=registry.gitlab.com/your-group/gpu-scheduler",
        "global.imageRegistry=mirror.example.com/gpu",
    )

    images = [c["image"] for owner in rendered.pod_owners() for c in pod_spec(owner)["containers"]]
    assert images and all(image.startswith("mirror.example.com/gpu/") for image in images), images


# -- Chart.yaml -----------------------------------------------------------------------


@pytest.mark.parametrize("chart", [SCHEDULER_CHART, CHECK_CHART], ids=lambda c: c.name)
def test_chart_names_its_maintainers_and_no_address_it_cannot_know(chart):
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())

    assert meta["maintainers"] == [{"name": "gpu-scheduler maintainers"}]
    # The project's repository has no public address yet: none is made up.
    assert "home" not in meta and "sources" not in meta


# -- the schema ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("chart", "assignment", "complaint"),
    [
        (SCHEDULER_CHART, "scheduler.serviceAccount.nmae=x", "nmae"),
        (SCHEDULER_CHART, "webhook.serviceAccount.create=yes", "webhook/serviceAccount/create"),
        (SCHEDULER_CHART, "certs.serviceAccount.annotation.a=b", "annotation"),
        (SCHEDULER_CHART, "webhook.podLabel.team=gpu", "podLabel"),
        (SCHEDULER_CHART, "scheduler.podLabels.team=Not Valid", "scheduler/podLabels"),
        (SCHEDULER_CHART, "scheduler.extraArgs=--x", "scheduler/extraArgs"),
        (SCHEDULER_CHART, "webhook.extraEnv[0].value=x", "webhook/extraEnv"),
        (SCHEDULER_CHART, "webhook.topologySpreadConstraint[0].maxSkew=1", "topologySpreadConstraint"),
        (SCHEDULER_CHART, "image.digest=latest", "image/digest"),
        (
            SCHEDULER_CHART,
            "scheduler.podDisruptionBudget.unhealthyPodEvictionPolicy=Always",
            "scheduler/podDisruptionBudget/unhealthyPodEvictionPolicy",
        ),
        (CHECK_CHART, "podLabel.team=gpu", "podLabel"),
        (CHECK_CHART, "podAnnotations.a=1", "podAnnotations/a"),
        (CHECK_CHART, "topologySpreadConstraints[0].maxSkew=x", "topologySpreadConstraints/0/maxSkew"),
        (CHECK_CHART, "image.digest=sha256:abc", "image/digest"),
    ],
)
def test_schema_rejects_a_mistyped_convention_value(helm, chart, assignment, complaint):
    stderr = refused_render(helm, chart, assignment)
    assert complaint in stderr, stderr


# -- helm upgrade --reuse-values ------------------------------------------------------------


@pytest.mark.parametrize("dropped", ["commonLabels", "scheduler.livenessProbe", "webhook.livenessProbe"])
def test_values_of_an_older_chart_are_refused_saying_how_to_upgrade(helm, dropped):
    # --reuse-values renders with the previous chart's defaults: a value added since is
    # missing (null removes it here), and the probes would silently vanish.
    stderr = refused_render(helm, SCHEDULER_CHART, f"{dropped}=null")
    assert "--reset-then-reuse-values" in stderr, stderr


# -- security contexts ----------------------------------------------------------


def security_contexts(rendered) -> dict[str, tuple[dict, list[dict]]]:
    """Each pod owner's name -> (its pods' securityContext, its containers' securityContexts)."""
    found = {}
    for owner in rendered.of_kind("Deployment", "DaemonSet", "Job", "CronJob"):
        spec = pod_spec(owner)
        found[owner["metadata"]["name"]] = (spec["securityContext"], [c["securityContext"] for c in spec["containers"]])
    return found


def test_each_component_merges_its_own_security_contexts_over_the_charts(render):
    default = security_contexts(render(SCHEDULER_CHART, "agent.enabled=true"))
    told = security_contexts(
        render(
            SCHEDULER_CHART,
            "agent.enabled=true",
            "agent.securityContext.readOnlyRootFilesystem=false",
            "webhook.podSecurityContext.runAsUser=2000",
            "certs.job.securityContext.capabilities.add[0]=NET_BIND_SERVICE",
        )
    )

    assert set(told) == set(default) and len(told) >= 6  # scheduler, webhook, agent, 3 for the certificates
    for name, (pod, containers) in default.items():
        # The chart's own: every component alike.
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert all(c["readOnlyRootFilesystem"] is True and c["capabilities"] == {"drop": ["ALL"]} for c in containers)
    changed = {name for name in told if told[name] != default[name]}
    certificate_owners = {name for name in told if name.startswith("gpu-scheduler-certs")}
    assert changed == {"gpu-scheduler-agent", WEBHOOK} | certificate_owners
    assert told["gpu-scheduler-agent"][1][0] == {
        **default["gpu-scheduler-agent"][1][0],
        "readOnlyRootFilesystem": False,
    }
    # Merged at any depth: the rest of the chart's pod context stays.
    assert told[WEBHOOK][0] == {**default[WEBHOOK][0], "runAsUser": 2000}
    for name in certificate_owners:
        (container,) = told[name][1]
        assert container["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}, name
