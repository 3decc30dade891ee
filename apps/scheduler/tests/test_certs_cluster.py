"""Secret and caBundle handling against a real API server (the local control plane)."""

import base64
import subprocess
import uuid

import pytest
from gpu_scheduler.certs import generate_bundle
from gpu_scheduler.certs.cluster import (
    ClusterCertsError,
    ensure_secret,
    patch_ca_bundle,
)
from gpu_scheduler.kube.client import ApiError, KubeClient, load_configuration
from kubernetes import client
from webhook_server import CLI

pytestmark = pytest.mark.cluster

SERVICE = "gpu-scheduler-webhook"


@pytest.fixture
def kube(kubeconfig):
    return KubeClient(load_configuration(kubeconfig))


@pytest.fixture
def core(api_client):
    return client.CoreV1Api(api_client)


def bundle_for(namespace, service=SERVICE):
    return generate_bundle(service, namespace)


def secret_data(core, namespace, name):
    secret = core.read_namespaced_secret(name, namespace)
    return secret.type, {key: base64.b64decode(value) for key, value in secret.data.items()}


def test_absent_secret_is_created_as_a_tls_secret(kube, core, namespace):
    bundle = bundle_for(namespace)
    outcome = ensure_secret(kube, namespace, "webhook-tls", bundle)
    assert outcome.action == "created"
    assert outcome.trust_pem == bundle.ca_cert_pem
    assert secret_data(core, namespace, "webhook-tls") == (
        "kubernetes.io/tls",
        {
            "tls.crt": bundle.tls_cert_pem,
            "tls.key": bundle.tls_key_pem,
            "ca.crt": bundle.ca_cert_pem,
        },
    )


def test_good_secret_is_kept_so_the_hook_is_idempotent(kube, core, namespace):
    first = bundle_for(namespace)
    ensure_secret(kube, namespace, "webhook-tls", first)
    version = core.read_namespaced_secret("webhook-tls", namespace).metadata.resource_version
    outcome = ensure_secret(kube, namespace, "webhook-tls", bundle_for(namespace))
    assert outcome.action == "kept"
    assert outcome.bundle == first
    assert outcome.trust_pem == first.ca_cert_pem
    assert core.read_namespaced_secret("webhook-tls", namespace).metadata.resource_version == version


def test_secret_for_other_names_is_replaced_and_both_cas_are_trusted_meanwhile(kube, core, namespace):
    old = bundle_for(namespace, service="old-service")
    ensure_secret(kube, namespace, "webhook-tls", old)
    new = bundle_for(namespace)
    outcome = ensure_secret(kube, namespace, "webhook-tls", new)
    assert outcome.action == "replaced"
    assert outcome.reason == "its names differ from the requested ones"
    assert outcome.trust_pem == new.ca_cert_pem + old.ca_cert_pem
    assert secret_data(core, namespace, "webhook-tls")[1]["tls.crt"] == new.tls_cert_pem


def test_secret_of_another_type_is_not_touched(kube, core, namespace):
    core.create_namespaced_secret(namespace, {"metadata": {"name": "webhook-tls"}, "type": "Opaque", "data": {}})
    with pytest.raises(
        ClusterCertsError,
        match="exists with type 'Opaque'.*delete it or use another --secret name",
    ):
        ensure_secret(kube, namespace, "webhook-tls", bundle_for(namespace))
    assert core.read_namespaced_secret("webhook-tls", namespace).type == "Opaque"


@pytest.fixture
def webhook_configurations(api_client):
    """A Mutating- and a ValidatingWebhookConfiguration that match nothing:
    their namespace selector names a label no namespace carries."""
    name = f"certs-test-{uuid.uuid4().hex[:8]}"
    admission = client.AdmissionregistrationV1Api(api_client)

    def webhooks(prefix):
        return [
            {
                "name": f"{prefix}{i}.gpu-scheduler.test",
                "clientConfig": {
                    "service": {
                        "name": SERVICE,
                        "namespace": "default",
                        "path": f"/{prefix}",
                    }
                },
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"never-matches": name}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 1,
            }
            for i in range(2)
        ]

    admission.create_mutating_webhook_configuration({"metadata": {"name": name}, "webhooks": webhooks("mutate")})
    admission.create_validating_webhook_configuration({"metadata": {"name": name}, "webhooks": webhooks("validate")})
    yield name, admission
    admission.delete_mutating_webhook_configuration(name)
    admission.delete_validating_webhook_configuration(name)


def ca_bundles(admission, name):
    mutating = admission.read_mutating_webhook_configuration(name).webhooks
    validating = admission.read_validating_webhook_configuration(name).webhooks
    return [w.client_config.ca_bundle for w in mutating + validating]


def test_ca_bundle_is_set_on_every_webhook_of_both_configurations(kube, webhook_configurations):
    name, admission = webhook_configurations
    ca = generate_bundle(ips=["127.0.0.1"]).ca_cert_pem
    assert patch_ca_bundle(kube, name, ca) == [
        f"MutatingWebhookConfiguration {name}: caBundle set on 2 of 2 webhooks",
        f"ValidatingWebhookConfiguration {name}: caBundle set on 2 of 2 webhooks",
    ]
    assert ca_bundles(admission, name) == [base64.b64encode(ca).decode()] * 4
    assert (
        patch_ca_bundle(kube, name, ca)[0]
        == f"MutatingWebhookConfiguration {name}: caBundle already current (2 webhooks)"
    )


def test_patching_configurations_that_do_not_exist_is_an_error(kube):
    with pytest.raises(
        ClusterCertsError,
        match="neither a MutatingWebhookConfiguration nor a ValidatingWebhookConfiguration",
    ):
        patch_ca_bundle(kube, f"absent-{uuid.uuid4().hex[:8]}", b"pem")


def test_certs_command_in_cluster_mode_twice(kubeconfig, core, namespace, webhook_configurations):
    name, admission = webhook_configurations
    command = [
        CLI,
        "certs",
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        namespace,
        "--service",
        SERVICE,
        "--secret",
        "webhook-tls",
        "--patch-webhook",
        name,
    ]
    first = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert f"Secret {namespace}/webhook-tls created" in first.stderr
    _, data = secret_data(core, namespace, "webhook-tls")
    assert first.stdout.strip() == base64.b64encode(data["ca.crt"]).decode()
    assert ca_bundles(admission, name) == [first.stdout.strip()] * 4

    second = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stderr
    assert f"Secret {namespace}/webhook-tls kept" in second.stderr
    assert second.stdout == first.stdout
    assert "caBundle already current" in second.stderr


def test_a_pre_install_run_creates_the_secret_when_no_configuration_exists_yet(kubeconfig, core, namespace):
    absent = f"absent-{uuid.uuid4().hex[:8]}"
    command = [CLI, "certs", "--kubeconfig", kubeconfig, "--namespace", namespace, "--service", SERVICE]
    command += ["--secret", "webhook-tls", "--patch-webhook", absent]

    strict = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    tolerant = subprocess.run(
        [*command, "--allow-missing-webhook"], check=False, capture_output=True, text=True, timeout=60
    )

    assert strict.returncode == 1
    assert (
        f"neither a MutatingWebhookConfiguration nor a ValidatingWebhookConfiguration named {absent!r}" in strict.stderr
    )
    assert tolerant.returncode == 0, tolerant.stderr
    assert f"no webhook configuration named {absent} yet: nothing to patch" in tolerant.stderr
    assert secret_data(core, namespace, "webhook-tls")[0] == "kubernetes.io/tls"


def test_a_renewal_the_api_server_would_refuse_adds_no_ca(kube, core, namespace, webhook_configurations):
    # An immutable Secret cannot be rewritten: the dry run of the write is refused, so
    # before_write never runs and no CA of a certificate that was never stored is trusted.
    name, admission = webhook_configurations
    before = ca_bundles(admission, name)
    old = bundle_for(namespace, service="old-service")
    core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": "webhook-tls"},
            "type": "kubernetes.io/tls",
            "immutable": True,
            "data": {
                "tls.crt": base64.b64encode(old.tls_cert_pem).decode(),
                "tls.key": base64.b64encode(old.tls_key_pem).decode(),
                "ca.crt": base64.b64encode(old.ca_cert_pem).decode(),
            },
        },
    )
    trusted = []

    with pytest.raises(ApiError, match="HTTP 422"):
        ensure_secret(kube, namespace, "webhook-tls", bundle_for(namespace), before_write=trusted.append)

    assert trusted == [] and ca_bundles(admission, name) == before
