"""The gpu-scheduler release `make e2e` installed with helm: its certificate hooks ran for real.

The chart's pre-install/pre-upgrade Job runs `gpu-scheduler certs` in a pod
to make the webhook's Secret, and its post-install/post-upgrade Job writes
that Secret's CA into both webhook configurations. Helm deletes the Jobs once
they succeed, and nothing here trusts our own logs. The oracles are the
cluster's records: the Events that the job controller, kube-scheduler and the
kubelet wrote about the Jobs' pods; the objects' managedFields (which client
wrote which field, and when); the certificate the running webhook pods serve;
and the API server calling the webhook on a dry-run.
"""

from __future__ import annotations

import base64
import datetime
import re

import pytest
from cryptography import x509
from kubernetes import client
from kubernetes.client.rest import ApiException

from .charts import KUBECTL
from .cluster import FROM_BIND, devices_entry, get_json, served_certificate
from .conftest import INSTALLED_NAMESPACE, INSTALLED_RELEASE
from .waiting import NotYet, wait_for
from .workloads import bare_pod

pytestmark = [pytest.mark.e2e, pytest.mark.installed_only]

SECRET = f"{INSTALLED_RELEASE}-webhook-tls"
SERVICE = f"{INSTALLED_RELEASE}-webhook"
JOBS = {"create": f"{INSTALLED_RELEASE}-certs-create", "patch": f"{INSTALLED_RELEASE}-certs-patch"}
# The User-Agent of `gpu-scheduler certs`, which the API server records as
# the manager of the fields it writes.
CERTS_MANAGER = "gpu-scheduler"
CONFIGURATION_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}
# An Event's or managedFields' time has one-second resolution.
SLACK = datetime.timedelta(seconds=1)


def parse_time(value: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))


def event_time(event: dict) -> datetime.datetime:
    """When an Event last happened: core Events carry lastTimestamp, events.k8s.io ones eventTime."""
    return parse_time(event.get("lastTimestamp") or event.get("eventTime") or event["firstTimestamp"])


def events_about(api_client, kind: str, name: str) -> list[dict]:
    return get_json(
        api_client,
        f"/api/v1/namespaces/{INSTALLED_NAMESPACE}/events",
        {"fieldSelector": f"involvedObject.kind={kind},involvedObject.name={name}"},
    )["items"]


def current_revision(api_client) -> tuple[int, datetime.datetime]:
    """The release's latest revision and when helm recorded it: at the start of that
    install or upgrade, before its pre-* hooks ran (helm's release Secret, not our log)."""
    records = get_json(
        api_client,
        f"/api/v1/namespaces/{INSTALLED_NAMESPACE}/secrets",
        {"labelSelector": f"owner=helm,name={INSTALLED_RELEASE}"},
    )["items"]
    assert records, f"no helm release {INSTALLED_RELEASE} in {INSTALLED_NAMESPACE}"
    latest = max(records, key=lambda s: int(s["metadata"]["labels"]["version"]))
    return int(latest["metadata"]["labels"]["version"]), parse_time(latest["metadata"]["creationTimestamp"])


def job_run(api_client, job: str, since: datetime.datetime) -> dict:
    """The pod a hook Job made for the current revision and what the cluster recorded of it:
    {"pod", "node", "started", "completed"}."""
    job_events = [e for e in events_about(api_client, "Job", job) if event_time(e) >= since - SLACK]
    created = [e for e in job_events if e["reason"] == "SuccessfulCreate"]
    completed = [e for e in job_events if e["reason"] == "Completed"]
    assert created and completed, f"Job {job}: no SuccessfulCreate and Completed events since {since}: {job_events}"
    pod = re.fullmatch(r"Created pod: (\S+)", created[-1]["message"]).group(1)
    pod_events = events_about(api_client, "Pod", pod)
    reasons = {e["reason"]: e for e in pod_events}
    assert {"Scheduled", "Started"} <= set(reasons), f"pod {pod} of Job {job}: {pod_events}"
    node = re.search(r" to (\S+)$", reasons["Scheduled"]["message"]).group(1)
    # The kubelet of that node started the container (its Event names its host).
    assert reasons["Started"]["source"] == {"component": "kubelet", "host": node}, reasons["Started"]
    return {
        "pod": pod,
        "node": node,
        "started": event_time(reasons["Started"]),
        "completed": event_time(completed[-1]),
    }


def managed_by(obj: dict, field_path: re.Pattern) -> dict[str, datetime.datetime]:
    """manager -> time of its last write, for the managers whose fieldsV1 contain `field_path`."""
    return {
        entry["manager"]: parse_time(entry["time"])
        for entry in obj["metadata"].get("managedFields") or []
        if field_path.search(str(entry.get("fieldsV1")))
    }


def the_secret(api_client) -> dict:
    return get_json(api_client, f"/api/v1/namespaces/{INSTALLED_NAMESPACE}/secrets/{SECRET}")


def secret_pem(secret: dict, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def configurations(api_client) -> dict[str, dict]:
    return {kind: get_json(api_client, f"{path}/{INSTALLED_RELEASE}") for kind, path in CONFIGURATION_PATHS.items()}


def test_both_certificate_jobs_ran_as_pods_on_a_worker_for_the_current_revision(api_client):
    revision, recorded = current_revision(api_client)
    batch = client.BatchV1Api(api_client)

    runs = {suffix: job_run(api_client, job, recorded) for suffix, job in JOBS.items()}

    print(f"\nrevision {revision} recorded {recorded}: {runs}")
    for run in runs.values():
        assert re.fullmatch(r"node[1-4]", run["node"]), run
        assert recorded - SLACK <= run["started"] <= run["completed"], run
    # pre-* before post-*: the Secret existed before its CA was written anywhere.
    assert runs["create"]["completed"] <= runs["patch"]["started"] + SLACK, runs
    # hook-delete-policy hook-succeeded: helm deleted them because they succeeded.
    for job in JOBS.values():
        with pytest.raises(ApiException) as gone:
            batch.read_namespaced_job(job, INSTALLED_NAMESPACE)
        assert gone.value.status == 404, job


def test_the_webhook_secret_was_written_by_the_certificate_job_not_by_helm(api_client):
    revision, recorded = current_revision(api_client)
    create = job_run(api_client, JOBS["create"], recorded)
    secret = the_secret(api_client)

    annotations = secret["metadata"].get("annotations") or {}
    labels = secret["metadata"].get("labels") or {}
    assert "meta.helm.sh/release-name" not in annotations and labels.get("app.kubernetes.io/managed-by") != "Helm"
    assert secret["type"] == "kubernetes.io/tls"
    writers = managed_by(secret, re.compile(r"f:tls\.crt"))
    assert set(writers) == {CERTS_MANAGER}, secret["metadata"]["managedFields"]
    written = writers[CERTS_MANAGER]
    if revision == 1:
        # A fresh install: this revision's Job created it.
        created = parse_time(secret["metadata"]["creationTimestamp"])
        assert create["started"] - SLACK <= created <= create["completed"] + SLACK, (created, create)
    # An upgrade's Job keeps a Secret that is still good, or replaces it while it runs.
    assert written <= recorded + SLACK or create["started"] - SLACK <= written <= create["completed"] + SLACK, (
        written,
        create,
    )
    certificate = x509.load_pem_x509_certificate(secret_pem(secret, "tls.crt"))
    certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(secret_pem(secret, "ca.crt")))
    names = set(
        certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
            x509.DNSName
        )
    )
    assert f"{SERVICE}.{INSTALLED_NAMESPACE}.svc" in names, names


def test_the_ca_bundle_holds_the_secrets_ca_and_was_written_by_the_patch_job(api_client):
    _, recorded = current_revision(api_client)
    patch = job_run(api_client, JOBS["patch"], recorded)
    ca = x509.load_pem_x509_certificate(secret_pem(the_secret(api_client), "ca.crt"))

    for kind, configuration in configurations(api_client).items():
        for webhook in configuration["webhooks"]:
            bundle = base64.b64decode(webhook["clientConfig"].get("caBundle") or "")
            assert ca in x509.load_pem_x509_certificates(bundle), f"{kind} {webhook['name']}: CA not in caBundle"
        writers = managed_by(configuration, re.compile(r"f:caBundle"))
        assert set(writers) == {CERTS_MANAGER}, (kind, configuration["metadata"]["managedFields"])
        # Written by this revision's Job, or by an earlier one and found current since.
        written = writers[CERTS_MANAGER]
        assert written <= patch["completed"] + SLACK, (kind, written, patch)


def serving_certificate(kubeconfig: str, ca_bundle: bytes) -> bytes:
    """The certificate a webhook pod serves, reached through `kubectl port-forward` to its
    Service, verified against `ca_bundle` for the name the API server uses."""
    kubectl = [str(KUBECTL), "--kubeconfig", kubeconfig]
    hostname = f"{SERVICE}.{INSTALLED_NAMESPACE}.svc"
    return served_certificate(kubectl, INSTALLED_NAMESPACE, f"svc/{SERVICE}", 443, ca_bundle, hostname)


def test_the_webhook_pods_serve_the_secrets_certificate_trusted_by_the_ca_bundle(kubeconfig, api_client):
    secret = the_secret(api_client)
    bundle = base64.b64decode(
        configurations(api_client)["MutatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]["caBundle"]
    )

    served = serving_certificate(kubeconfig, bundle)

    expected = x509.load_pem_x509_certificate(secret_pem(secret, "tls.crt"))
    assert x509.load_der_x509_certificate(served) == expected


def test_the_api_server_calls_the_webhook_through_that_trust_on_a_dry_run(api_client, ns):
    webhook = configurations(api_client)["MutatingWebhookConfiguration"]["webhooks"][0]
    assert webhook["failurePolicy"] == "Fail"  # an untrusted certificate would refuse the pod
    core = client.CoreV1Api(api_client)

    def admitted() -> dict:
        try:
            created = core.create_namespaced_pod(ns, bare_pod("dry-run-2", "2=node3:0,1,2\n"), dry_run="All")
        except ApiException as err:
            raise NotYet(f"{err.status}: {err.body}") from None
        return api_client.sanitize_for_serialization(created)

    pod = wait_for("a dry-run pod admitted by the webhook", admitted, timeout=30)
    # The pod was sent without an entry: admission gave it the entry that reads the devices from
    # the bind (a dry run is never bound).
    assert devices_entry(pod["spec"]["containers"][0]) == FROM_BIND, pod["spec"]["containers"][0]
    assert not core.list_namespaced_pod(ns).items  # a dry run stores nothing
