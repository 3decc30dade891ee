"""Golden checks of charts/gpu-scheduler as `helm template` renders it.

What users install is the rendered YAML, so every check here reads that
output (parsed with PyYAML), never the templates' text.
"""

from __future__ import annotations

import pytest

from .conftest import (
    SCHEDULER_CHART,
    SCHEDULER_NAMESPACE,
    TEST_REGISTRY,
    annotations,
    container_args,
    flag,
    pod_spec,
    refused_render,
    wave,
)

pytestmark = pytest.mark.delivery

RELEASE = "gpu-scheduler"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def webhooks(rendered) -> list[dict]:
    return [w for config in rendered.of_kind(*WEBHOOK_KINDS) for w in config["webhooks"]]


def normalized(rules: list[dict]) -> list[dict]:
    """Rules with every list sorted, so the comparison ignores order only."""
    return sorted(
        ({key: sorted(value) for key, value in rule.items()} for rule in rules),
        key=repr,
    )


# Every permission of the chart, per Role/ClusterRole: exactly the API calls
# the code makes (kube/informer, kube/binder, kube/events, kube/pod_status,
# kube/leader and certs/cluster). Adding anything, a wildcard or `secrets list` say, fails here.
EXPECTED_RBAC = {
    ("ClusterRole", "gpu-scheduler-scheduler"): [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"], "verbs": ["list", "watch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csinodes"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["patch"]},
        {
            "apiGroups": ["events.k8s.io"],
            "resources": ["events"],
            "verbs": ["create", "patch"],
        },
    ],
    ("Role", "gpu-scheduler-scheduler-leader-election"): [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create"],
        },
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["gpu-scheduler"],
            "verbs": ["get", "update"],
        },
    ],
    ("Role", "gpu-scheduler-certs"): [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["gpu-scheduler-webhook-tls"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ],
    ("ClusterRole", "gpu-scheduler-certs"): [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": [
                "mutatingwebhookconfigurations",
                "validatingwebhookconfigurations",
            ],
            "resourceNames": ["gpu-scheduler"],
            "verbs": ["get", "update"],
        },
    ],
    # `helm test`: the probe pod in tests.namespace, and the nodes to pick one from.
    ("Role", "gpu-scheduler-smoke-test"): [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "delete"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ],
    ("ClusterRole", "gpu-scheduler-smoke-test"): [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]},
    ],
    # webhook.readNodes: one named Node (a map's alias label), and a watch of the nodes that
    # publish GPUs (webhook/gpu_nodes.py).
    ("ClusterRole", "gpu-scheduler-webhook"): [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    ],
    # The inventory agent: GET its Node, PATCH what it publishes (agent/runner.py).
    ("ClusterRole", "gpu-scheduler-agent"): [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    ],
}
# The renewal CronJob's standing identity may do exactly what the hook Jobs may.
EXPECTED_RBAC[("Role", "gpu-scheduler-certs-renewal")] = EXPECTED_RBAC[("Role", "gpu-scheduler-certs")]
EXPECTED_RBAC[("ClusterRole", "gpu-scheduler-certs-renewal")] = EXPECTED_RBAC[("ClusterRole", "gpu-scheduler-certs")]


def test_rbac_grants_exactly_the_calls_the_code_makes(render):
    rendered = render(SCHEDULER_CHART)

    actual = {
        (doc["kind"], doc["metadata"]["name"]): normalized(doc["rules"])
        for doc in rendered.of_kind("Role", "ClusterRole")
    }

    assert actual == {key: normalized(rules) for key, rules in EXPECTED_RBAC.items()}


def test_each_service_account_is_bound_only_to_its_own_role(render):
    rendered = render(SCHEDULER_CHART)

    bindings = {
        (doc["kind"], doc["metadata"]["name"]): (
            doc["roleRef"]["name"],
            [(s["kind"], s["name"], s["namespace"]) for s in doc["subjects"]],
        )
        for doc in rendered.of_kind("RoleBinding", "ClusterRoleBinding")
    }

    scheduler = [("ServiceAccount", "gpu-scheduler-scheduler", SCHEDULER_NAMESPACE)]
    certs = [("ServiceAccount", "gpu-scheduler-certs", SCHEDULER_NAMESPACE)]
    renewal = [("ServiceAccount", "gpu-scheduler-certs-renewal", SCHEDULER_NAMESPACE)]
    smoke_test = [("ServiceAccount", "gpu-scheduler-smoke-test", SCHEDULER_NAMESPACE)]
    webhook = [("ServiceAccount", "gpu-scheduler-webhook", SCHEDULER_NAMESPACE)]
    agent = [("ServiceAccount", "gpu-scheduler-agent", SCHEDULER_NAMESPACE)]
    assert bindings == {
        ("ClusterRoleBinding", "gpu-scheduler-scheduler"): (
            "gpu-scheduler-scheduler",
            scheduler,
        ),
        ("RoleBinding", "gpu-scheduler-scheduler-leader-election"): (
            "gpu-scheduler-scheduler-leader-election",
            scheduler,
        ),
        ("RoleBinding", "gpu-scheduler-certs"): ("gpu-scheduler-certs", certs),
        ("ClusterRoleBinding", "gpu-scheduler-certs"): ("gpu-scheduler-certs", certs),
        ("RoleBinding", "gpu-scheduler-certs-renewal"): ("gpu-scheduler-certs-renewal", renewal),
        ("ClusterRoleBinding", "gpu-scheduler-certs-renewal"): ("gpu-scheduler-certs-renewal", renewal),
        ("RoleBinding", "gpu-scheduler-smoke-test"): ("gpu-scheduler-smoke-test", smoke_test),
        ("ClusterRoleBinding", "gpu-scheduler-smoke-test"): ("gpu-scheduler-smoke-test", smoke_test),
        ("ClusterRoleBinding", "gpu-scheduler-webhook"): ("gpu-scheduler-webhook", webhook),
        ("ClusterRoleBinding", "gpu-scheduler-agent"): ("gpu-scheduler-agent", agent),
    }


def test_webhook_pods_get_no_api_credentials(render):
    # With webhook.readNodes (the default) it reads Nodes: tests/delivery/test_chart_agent.py.
    rendered = render(SCHEDULER_CHART, "webhook.readNodes=false")
    deployment = rendered.one("Deployment", "gpu-scheduler-webhook")
    account = rendered.one("ServiceAccount", "gpu-scheduler-webhook")

    assert pod_spec(deployment)["serviceAccountName"] == "gpu-scheduler-webhook"
    assert pod_spec(deployment)["automountServiceAccountToken"] is False
    assert account["automountServiceAccountToken"] is False


def test_provided_mode_may_only_read_the_users_secret(render):
    rendered = render(SCHEDULER_CHART, "certs.mode=provided", "certs.existingSecret=my-webhook-tls")

    role = rendered.one("Role", "gpu-scheduler-certs")
    deployment = rendered.one("Deployment", "gpu-scheduler-webhook")

    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["my-webhook-tls"],
            "verbs": ["get"],
        }
    ]
    volumes = {v["name"]: v for v in pod_spec(deployment)["volumes"]}
    assert volumes["certs"]["secret"]["secretName"] == "my-webhook-tls"
    # The Secret already exists: no Job creates one, the post-install Job
    # copies its CA into the webhook configurations.
    jobs = {job["metadata"]["name"]: job for job in rendered.of_kind("Job")}
    assert sorted(jobs) == ["gpu-scheduler-certs-patch"]
    args = container_args(jobs["gpu-scheduler-certs-patch"])
    assert flag(args, "secret") == "my-webhook-tls"
    assert flag(args, "patch-webhook") == "gpu-scheduler"
    # Its RBAC exists for the post phase only, like the one Job.
    for doc in rendered.docs:
        if doc["metadata"]["name"] == "gpu-scheduler-certs":
            assert annotations(doc)["helm.sh/hook"] == "post-install,post-upgrade"


@pytest.mark.parametrize("scheduler_name", ["gpu-scheduler", "team-a.scheduler"])
def test_webhooks_are_only_called_for_pods_and_workloads_of_our_scheduler(render, scheduler_name):
    rendered = render(SCHEDULER_CHART, f"schedulerName={scheduler_name}")

    conditions = {
        w["name"]: {c["name"]: c["expression"].split() for c in w["matchConditions"]} for w in webhooks(rendered)
    }

    def ours(path: str) -> list[str]:
        """has(...) of every field down to schedulerName, then the comparison, as tokens."""
        parts = f"{path}.spec.schedulerName".split(".")
        checks = [f"has({'.'.join(parts[: i + 1])})" for i in range(1, len(parts))]
        tokens = " && ".join(checks).split()
        tokens[0] = "(" + tokens[0]
        return [*tokens, "&&", f"{path}.spec.schedulerName", "==", f"'{scheduler_name}')"]

    assert {name: c["scheduled-by-us"] for name, c in conditions.items()} == {
        "pods.mutate.gpu-scheduler": ours("object"),
        "workloads.mutate.gpu-scheduler": ours("object.spec.template"),
        "pods.validate.gpu-scheduler": ours("object"),
        "workloads.validate.gpu-scheduler": ours("object.spec.template"),
        "cronjobs.validate.gpu-scheduler": ours("object.spec.jobTemplate.spec.template"),
    }


def test_validating_webhooks_only_see_updates_that_change_the_map(render):
    """What the conditions mean is proven against the real API server
    (tests/e2e/test_webhook_updates.py); here: each looks at its own template."""
    rendered = render(SCHEDULER_CHART)
    templates = {
        "pods.validate.gpu-scheduler": "object",
        "workloads.validate.gpu-scheduler": "object.spec.template",
        "cronjobs.validate.gpu-scheduler": "object.spec.jobTemplate.spec.template",
    }
    for webhook in webhooks(rendered):
        names = [c["name"] for c in webhook["matchConditions"]]
        if webhook["name"] == "workloads.mutate.gpu-scheduler":
            # StatefulSets and Jobs with a map lacking the entry (test_chart_bind_mode.py)
            assert names == ["scheduled-by-us", "has-map", "lacks-bind-entry", "template-changed-on-update"]
            continue
        if webhook["name"] not in templates:
            # mutating: CREATE, and debug containers; in bind mode (the default) only pods with a
            # map that need it (test_chart_bind_mode.py)
            assert names == ["scheduled-by-us", "needs-the-webhook"], webhook["name"]
            continue
        assert names == ["scheduled-by-us", "map-changed-on-update"], webhook["name"]
        expression = " ".join(webhook["matchConditions"][1]["expression"].split())
        new, old = templates[webhook["name"]], "oldObject" + templates[webhook["name"]].removeprefix("object")
        assert expression.startswith("request.operation != 'UPDATE' || !(has(oldObject.spec)"), expression
        assert f"{old}.spec.schedulerName == 'gpu-scheduler'" in expression
        assert f"'gpu-scheduling-map' in {new}.metadata.annotations" in expression
        assert (
            f"{new}.metadata.annotations['gpu-scheduling-map'] != {old}.metadata.annotations['gpu-scheduling-map']"
            in expression
        )


@pytest.mark.parametrize("namespace", [SCHEDULER_NAMESPACE, "platform"])
def test_webhooks_never_see_kube_system_nor_the_release_namespace(render, namespace):
    rendered = render(SCHEDULER_CHART, namespace=namespace)

    for webhook in webhooks(rendered):
        assert webhook["namespaceSelector"] == {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "NotIn",
                    "values": ["kube-system", namespace],
                },
                OPT_OUT,
            ]
        }, webhook["name"]


OPT_OUT = {"key": "gpu-scheduler.io/webhook", "operator": "NotIn", "values": ["disabled"]}


def test_namespaces_and_objects_labelled_disabled_are_never_sent_to_the_webhook(render):
    found = webhooks(render(SCHEDULER_CHART))

    assert {w["name"] for w in found} == {
        "pods.mutate.gpu-scheduler",
        "workloads.mutate.gpu-scheduler",
        "pods.validate.gpu-scheduler",
        "workloads.validate.gpu-scheduler",
        "cronjobs.validate.gpu-scheduler",
    }
    for webhook in found:
        assert OPT_OUT in webhook["namespaceSelector"]["matchExpressions"], webhook["name"]
        assert webhook["objectSelector"] == {"matchExpressions": [OPT_OUT]}, webhook["name"]


@pytest.mark.parametrize(("policy", "timeout"), [("Fail", 5), ("Ignore", 12)])
def test_failure_policy_and_timeout_come_from_values(render, policy, timeout):
    rendered = render(SCHEDULER_CHART, f"webhook.failurePolicy={policy}", f"webhook.timeoutSeconds={timeout}")

    found = {w["name"]: (w["failurePolicy"], w["timeoutSeconds"]) for w in webhooks(rendered)}

    # The mutating webhook's policy; the validating ones fail open whatever it says.
    assert found.pop("pods.mutate.gpu-scheduler") == (policy, timeout)
    assert set(found.values()) == {("Ignore", timeout)}


def test_webhook_defaults_fail_closed_within_five_seconds_and_validate_failing_open(render):
    """The mutating webhook, which only pods that need it reach,
    fails closed; the validating ones (maps at `kubectl apply`) let everything through while
    no webhook answers: the scheduler refuses a broken map anyway."""
    found = {w["name"]: (w["failurePolicy"], w["timeoutSeconds"]) for w in webhooks(render(SCHEDULER_CHART))}

    assert found == {
        "pods.mutate.gpu-scheduler": ("Fail", 5),
        # StatefulSets and Jobs let through without the entry: their pods get it one by one.
        "workloads.mutate.gpu-scheduler": ("Ignore", 5),
        "pods.validate.gpu-scheduler": ("Ignore", 5),
        "workloads.validate.gpu-scheduler": ("Ignore", 5),
        "cronjobs.validate.gpu-scheduler": ("Ignore", 5),
    }


def test_mutating_webhook_handles_pod_creation_and_debug_containers_on_mutate(render):
    (config,) = render(SCHEDULER_CHART).of_kind("MutatingWebhookConfiguration")
    (webhook,) = [w for w in config["webhooks"] if w["name"] == "pods.mutate.gpu-scheduler"]

    assert webhook["clientConfig"]["service"] == {
        "name": "gpu-scheduler-webhook",
        "namespace": SCHEDULER_NAMESPACE,
        "path": "/mutate",
        "port": 443,
    }
    assert webhook["rules"] == [
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["pods"],
            "scope": "Namespaced",
        },
        {
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "operations": ["UPDATE"],
            "resources": ["pods/ephemeralcontainers"],
            "scope": "Namespaced",
        },
    ]
    assert webhook["reinvocationPolicy"] == "IfNeeded"
    assert webhook["sideEffects"] == "None"
    assert webhook["admissionReviewVersions"] == ["v1"]


def test_validating_webhooks_check_pods_and_pod_templates_on_validate(render):
    (config,) = render(SCHEDULER_CHART).of_kind("ValidatingWebhookConfiguration")

    resources = {
        w["name"]: sorted(
            (group, resource, tuple(rule["operations"]))
            for rule in w["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
        )
        for w in config["webhooks"]
    }

    assert resources == {
        "pods.validate.gpu-scheduler": [("", "pods", ("UPDATE",))],
        "workloads.validate.gpu-scheduler": [
            ("apps", "daemonsets", ("CREATE", "UPDATE")),
            ("apps", "deployments", ("CREATE", "UPDATE")),
            ("apps", "replicasets", ("CREATE", "UPDATE")),
            ("apps", "statefulsets", ("CREATE", "UPDATE")),
            ("batch", "jobs", ("CREATE", "UPDATE")),
        ],
        "cronjobs.validate.gpu-scheduler": [("batch", "cronjobs", ("CREATE", "UPDATE"))],
    }
    for webhook in config["webhooks"]:
        assert webhook["clientConfig"]["service"]["path"] == "/validate"
        assert webhook["sideEffects"] == "None"


@pytest.mark.parametrize("mode", ["job", "provided"])
def test_webhook_configurations_carry_no_ca_bundle_for_the_cert_job_to_fill(render, mode):
    rendered = render(SCHEDULER_CHART, f"certs.mode={mode}", "certs.existingSecret=tls")

    for webhook in webhooks(rendered):
        # Rendering one (even empty) would let every helm upgrade or Argo CD
        # sync reset what the post-install Job wrote.
        assert "caBundle" not in webhook["clientConfig"], webhook["name"]


def test_cert_jobs_create_the_secret_first_and_patch_the_ca_after_install(render):
    rendered = render(SCHEDULER_CHART)
    create = rendered.one("Job", "gpu-scheduler-certs-create")
    patch = rendered.one("Job", "gpu-scheduler-certs-patch")
    webhook = rendered.one("Deployment", "gpu-scheduler-webhook")
    mounted = {v["name"]: v for v in pod_spec(webhook)["volumes"]}["certs"]["secret"]

    assert annotations(create)["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert annotations(patch)["helm.sh/hook"] == "post-install,post-upgrade"
    for job in (create, patch):
        args = container_args(job)
        assert args[0] == "certs"
        # The Secret the webhook mounts, for the Service the API server calls.
        assert flag(args, "secret") == mounted["secretName"]
        assert flag(args, "namespace") == SCHEDULER_NAMESPACE
        assert flag(args, "service") == "gpu-scheduler-webhook"
        assert annotations(job)["helm.sh/hook-delete-policy"] == ("before-hook-creation,hook-succeeded")
        assert pod_spec(job)["serviceAccountName"] == "gpu-scheduler-certs"
        assert pod_spec(job)["automountServiceAccountToken"] is True
    # Both trust a renewed CA in the configurations before the Secret changes; before
    # install the configurations do not exist yet, and only the pre hook may find none.
    for job in (create, patch):
        assert flag(container_args(job), "patch-webhook") == "gpu-scheduler"
    assert "--allow-missing-webhook" in container_args(create)
    assert "--allow-missing-webhook" not in container_args(patch)
    for kind in WEBHOOK_KINDS:
        rendered.one(kind, "gpu-scheduler")


def test_cert_job_rbac_exists_before_the_jobs_of_both_phases(render):
    rendered = render(SCHEDULER_CHART)
    rbac = [doc for doc in rendered.docs if doc["metadata"]["name"] == "gpu-scheduler-certs" and doc["kind"] != "Job"]

    assert sorted(doc["kind"] for doc in rbac) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ServiceAccount",
    ]
    for doc in rbac:
        hooks = set(annotations(doc)["helm.sh/hook"].split(","))
        assert hooks == {"pre-install", "pre-upgrade", "post-install", "post-upgrade"}
        assert int(annotations(doc)["helm.sh/hook-weight"]) < 0
    for job in rendered.of_kind("Job"):
        assert int(annotations(job)["helm.sh/hook-weight"]) == 0


def test_cert_manager_mode_issues_the_certificate_the_webhook_mounts(render):
    rendered = render(SCHEDULER_CHART, "certs.mode=cert-manager")
    certificate = rendered.one("Certificate", "gpu-scheduler-webhook")
    webhook = rendered.one("Deployment", "gpu-scheduler-webhook")
    mounted = {v["name"]: v for v in pod_spec(webhook)["volumes"]}["certs"]["secret"]

    assert rendered.of_kind("Job") == []
    assert certificate["spec"]["secretName"] == mounted["secretName"]
    service = f"gpu-scheduler-webhook.{SCHEDULER_NAMESPACE}.svc"
    assert service in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": "gpu-scheduler-ca",
    }
    rendered.one("Certificate", "gpu-scheduler-ca")
    for config in rendered.of_kind(*WEBHOOK_KINDS):
        assert annotations(config)["cert-manager.io/inject-ca-from"] == (f"{SCHEDULER_NAMESPACE}/gpu-scheduler-webhook")


def test_sync_waves_put_certificate_then_webhook_then_configurations_then_scheduler(
    render,
):
    rendered = render(SCHEDULER_CHART, "certs.mode=cert-manager")

    certificate = wave(rendered.one("Certificate", "gpu-scheduler-webhook"))
    webhook = wave(rendered.one("Deployment", "gpu-scheduler-webhook"))
    service = wave(rendered.one("Service", "gpu-scheduler-webhook"))
    configurations = {wave(doc) for doc in rendered.of_kind(*WEBHOOK_KINDS)}
    scheduler = wave(rendered.one("Deployment", "gpu-scheduler-scheduler"))

    assert certificate < webhook == service
    assert configurations == {webhook + 1}
    assert scheduler > webhook + 1


def test_no_argocd_hook_annotation_hides_the_helm_hooks(render):
    # Argo CD ignores every Helm hook of a chart that has any Argo CD hook.
    for doc in render(SCHEDULER_CHART).docs:
        assert "argocd.argoproj.io/hook" not in annotations(doc), doc["metadata"]["name"]


def test_scheduler_arguments_follow_the_values(render):
    rendered = render(
        SCHEDULER_CHART,
        "schedulerName=team-a",
        "scheduler.replicas=3",
        "scheduler.gpuSharing=deny",
        "scheduler.namespace=ml",
        "aliasLabel=example.com/gpu-node",
        "logFormat=text",
        "logLevel=debug",
    )
    deployment = rendered.one("Deployment", "gpu-scheduler-scheduler")
    args = container_args(deployment)

    assert deployment["spec"]["replicas"] == 3
    assert args[0] == "scheduler"
    assert {
        name: flag(args, name)
        for name in (
            "scheduler-name",
            "namespace",
            "gpu-sharing",
            "alias-label",
            "leader-elect",
            "leader-elect-resource-name",
            "leader-elect-resource-namespace",
            "metrics-port",
            "log-format",
            "log-level",
        )
    } == {
        "scheduler-name": "team-a",
        "namespace": "ml",
        "gpu-sharing": "deny",
        "alias-label": "example.com/gpu-node",
        "leader-elect": "true",
        "leader-elect-resource-name": "gpu-scheduler",
        "leader-elect-resource-namespace": "$(POD_NAMESPACE)",
        "metrics-port": "10251",
        "log-format": "text",
        "log-level": "debug",
    }
    env = {e["name"]: e for e in pod_spec(deployment)["containers"][0]["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_scheduler_defaults_run_two_replicas_with_leader_election(render):
    deployment = render(SCHEDULER_CHART).one("Deployment", "gpu-scheduler-scheduler")
    args = container_args(deployment)

    assert deployment["spec"]["replicas"] == 2
    assert flag(args, "leader-elect") == "true"
    assert flag(args, "scheduler-name") == "gpu-scheduler"
    # Every namespace is watched unless scheduler.namespace says otherwise.
    assert not any(a.startswith("--namespace") for a in args)


def test_webhook_arguments_follow_the_values(render):
    rendered = render(SCHEDULER_CHART, "schedulerName=team-a", "webhook.replicas=3")
    deployment = rendered.one("Deployment", "gpu-scheduler-webhook")
    args = container_args(deployment)

    assert deployment["spec"]["replicas"] == 3
    assert args[0] == "webhook"
    assert flag(args, "scheduler-name") == "team-a"
    assert flag(args, "tls-cert-file") == "/certs/tls.crt"
    assert flag(args, "tls-private-key-file") == "/certs/tls.key"
    assert flag(args, "port") == "8443"
    mounts = {m["name"]: m for m in pod_spec(deployment)["containers"][0]["volumeMounts"]}
    assert mounts["certs"] == {"name": "certs", "mountPath": "/certs", "readOnly": True}


def test_probes_ask_the_real_health_endpoints(render):
    rendered = render(SCHEDULER_CHART)
    scheduler = pod_spec(rendered.one("Deployment", "gpu-scheduler-scheduler"))["containers"][0]
    webhook = pod_spec(rendered.one("Deployment", "gpu-scheduler-webhook"))["containers"][0]

    assert scheduler["ports"] == [{"name": "metrics", "containerPort": 10251, "protocol": "TCP"}]
    assert scheduler["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": "metrics",
    }
    assert scheduler["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "metrics",
    }
    assert webhook["ports"] == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]
    assert webhook["livenessProbe"]["httpGet"] == {
        "scheme": "HTTPS",
        "path": "/healthz",
        "port": "https",
    }
    assert webhook["readinessProbe"]["httpGet"] == {
        "scheme": "HTTPS",
        "path": "/readyz",
        "port": "https",
    }


@pytest.mark.parametrize("host_network", [False, True])
def test_every_place_that_names_the_webhook_port_agrees(render, host_network):
    """webhook.port, on the pod network or the node's (managed clusters whose control plane
    reaches only node addresses): the listener, the container port, the probes, the
    Service's target and the NetworkPolicy all name the same port."""
    rendered = render(
        SCHEDULER_CHART,
        "webhook.port=10250",
        f"webhook.hostNetwork={str(host_network).lower()}",
        "networkPolicy.enabled=true",
    )
    spec = pod_spec(rendered.one("Deployment", "gpu-scheduler-webhook"))
    (container,) = spec["containers"]
    (port,) = container["ports"]
    service = rendered.one("Service", "gpu-scheduler-webhook")
    policy = rendered.one("NetworkPolicy", "gpu-scheduler-webhook")

    def resolved(target) -> int:
        return port["containerPort"] if target == port["name"] else target

    assert flag(container["args"], "port") == "10250"
    assert port["containerPort"] == 10250
    for probe in ("livenessProbe", "readinessProbe"):
        assert resolved(container[probe]["httpGet"]["port"]) == 10250, probe
    (service_port,) = service["spec"]["ports"]
    assert resolved(service_port["targetPort"]) == 10250
    assert service_port["port"] == 443
    assert policy["spec"]["ingress"][0]["ports"] == [{"port": 10250, "protocol": "TCP"}]
    env = {e["name"]: e for e in container.get("env", [])}
    if host_network:
        assert spec["hostNetwork"] is True
        # Cluster DNS still answers the pod's lookups on the node's network.
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert port["hostPort"] == 10250
        # The pod's address is the node's: listen there only, not on every address of the node.
        assert flag(container["args"], "bind") == "$(POD_IP)"
        assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    else:
        assert "hostNetwork" not in spec and "dnsPolicy" not in spec
        assert "hostPort" not in port
        assert flag(container["args"], "bind") == "0.0.0.0"
        assert "POD_IP" not in env


def test_webhook_service_sends_443_to_the_webhook_pods(render):
    rendered = render(SCHEDULER_CHART)
    service = rendered.one("Service", "gpu-scheduler-webhook")
    deployment = rendered.one("Deployment", "gpu-scheduler-webhook")

    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_webhook_survives_a_node_drain(render):
    rendered = render(SCHEDULER_CHART)
    budget = rendered.one("PodDisruptionBudget", "gpu-scheduler-webhook")
    deployment = rendered.one("Deployment", "gpu-scheduler-webhook")

    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    (term,) = pod_spec(deployment)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"] == deployment["spec"]["selector"]


def test_image_reference_is_built_from_registry_repository_and_tag(render):
    default = render(SCHEDULER_CHART)
    custom = render(
        SCHEDULER_CHART,
        "image.registry=registry.example.com/team/",
        "image.tag=abc1234",
        "image.pullPolicy=Always",
    )

    # The registry a release pipeline pushes to, at the chart's appVersion (the tag the release pushed).
    for owner in default.pod_owners():
        assert pod_spec(owner)["containers"][0]["image"] == f"{TEST_REGISTRY}/gpu-scheduler:0.1.0"
    for owner in custom.pod_owners():
        container = pod_spec(owner)["containers"][0]
        assert container["image"] == "registry.example.com/team/gpu-scheduler:abc1234"
        assert container["imagePullPolicy"] == "Always"


def test_service_monitor_is_off_by_default_and_scrapes_metrics_when_on(render):
    assert render(SCHEDULER_CHART).of_kind("ServiceMonitor") == []

    rendered = render(SCHEDULER_CHART, "metrics.serviceMonitor.enabled=true")
    monitor = rendered.one("ServiceMonitor", "gpu-scheduler-scheduler")
    service = rendered.one("Service", "gpu-scheduler-scheduler-metrics")

    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (service["metadata"]["labels"].items())


@pytest.mark.parametrize(
    ("sets", "secret"),
    [((), "gpu-scheduler-webhook-tls"), (("certs.mode=provided", "certs.existingSecret=my-tls"), "my-tls")],
    ids=["job", "provided"],
)
def test_webhook_service_monitor_scrapes_https_trusting_the_releases_ca(render, sets, secret):
    rendered = render(SCHEDULER_CHART, "metrics.serviceMonitor.enabled=true", *sets)
    monitor = rendered.one("ServiceMonitor", "gpu-scheduler-webhook")
    service = rendered.one("Service", "gpu-scheduler-webhook")
    (endpoint,) = monitor["spec"]["endpoints"]

    # Only the webhook's Service: the job the webhook alerts select is its name.
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [
        s["metadata"]["name"]
        for s in rendered.of_kind("Service")
        if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ] == ["gpu-scheduler-webhook"]
    assert endpoint["port"] in [port["name"] for port in service["spec"]["ports"]]
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    # The serving certificate names the Service's DNS name and is signed by the Secret's CA.
    assert endpoint["tlsConfig"] == {
        "serverName": "gpu-scheduler-webhook.gpu-scheduler-system.svc",
        "ca": {"secret": {"name": secret, "key": "ca.crt"}},
    }


def test_every_object_carries_the_recommended_labels(render):
    for doc in render(SCHEDULER_CHART, "certs.mode=cert-manager").docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "gpu-scheduler", doc["metadata"]["name"]
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["helm.sh/chart"] == "gpu-scheduler-0.1.0"
        assert labels["app.kubernetes.io/component"] in {
            "scheduler",
            "webhook",
            "certs",
            "quota",
            "smoke-test",
            "agent",
        }


@pytest.mark.parametrize(
    ("assignment", "complaint"),
    [
        ("webhok.replicas=3", "webhok"),
        ("scheduler.replica=3", "replica"),
        ("certs.mode=manual", "certs/mode"),
        ("webhook.failurePolicy=fail", "failurePolicy"),
        ("scheduler.gpuSharing=maybe", "gpuSharing"),
        ("logFormat=xml", "logFormat"),
    ],
)
def test_schema_rejects_a_mistyped_value(helm, assignment, complaint):
    assert complaint in refused_render(helm, SCHEDULER_CHART, assignment, release=RELEASE)


def test_provided_mode_without_a_secret_name_is_refused(helm):
    assert "existingSecret" in refused_render(helm, SCHEDULER_CHART, "certs.mode=provided", release=RELEASE)


def test_several_schedulers_without_leader_election_are_refused(helm):
    refusal = refused_render(helm, SCHEDULER_CHART, "scheduler.leaderElection.enabled=false", release=RELEASE)
    assert "leaderElection" in refusal
