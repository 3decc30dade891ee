"""Registers a webhook running on this host with the API server, exactly as the chart scopes it.

The Mutating- and ValidatingWebhookConfiguration are rendered from
charts/gpu-scheduler with `helm template`, so rules, matchConditions,
namespaceSelector, failurePolicy and timeouts are the ones users install.
Only the address changes: the chart points at its Service; here each webhook
gets `clientConfig.url` on 127.0.0.1 (the local kube-apiserver runs on this
host) and the caBundle of `gpu-scheduler certs`.

Used by the e2e fixtures and by `make demo`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes import client
from kubernetes.client.rest import ApiException

from .charts import SCHEDULER_CHART, helm_template
from .cluster import CUDA_ENV, DEVICES_FIELD_PATH, ignoring_not_found
from .isolation import RUN_ID, RUN_LABEL, create_namespace, delete_namespace
from .waiting import NotYet, wait_for
from .workloads import SCHEDULER_NAME

# The chart excludes its release namespace from the webhooks; nothing runs there locally.
RELEASE_NAMESPACE = "gpu-scheduler"
KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
REGISTRATION_TIMEOUT = 30.0


def render(
    release: str,
    base_url: str,
    ca_bundle: str,
    namespace_label: tuple[str, str] | None = None,
    scheduler_name: str = SCHEDULER_NAME,
    values: tuple[str, ...] = (),
) -> list[dict]:
    """The chart's two webhook configurations (its default values but `scheduler_name`, the
    chart's schedulerName, and `values`: "key=value" as `helm --set-string` takes them),
    addressed to `base_url` (https://127.0.0.1:PORT).

    `namespace_label` (key, value) narrows every webhook further to namespaces
    carrying that label, so the e2e suite's webhook never handles the pods of
    other suites that share the cluster.
    """
    configurations = helm_template(
        release,
        SCHEDULER_CHART,
        RELEASE_NAMESPACE,
        "--show-only",
        "templates/webhook-configurations.yaml",
        "--set-string",
        f"schedulerName={scheduler_name}",
        *(argument for value in values for argument in ("--set-string", value)),
    )
    kinds = sorted(doc["kind"] for doc in configurations)
    if kinds != sorted(KINDS):
        raise AssertionError(f"expected the chart to render {', '.join(KINDS)}; got {kinds}")
    for configuration in configurations:
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url + path, "caBundle": ca_bundle}
            if namespace_label:
                key, value = namespace_label
                selector = webhook.setdefault("namespaceSelector", {})
                selector.setdefault("matchExpressions", []).append({"key": key, "operator": "In", "values": [value]})
    return configurations


def _api_calls(api: client.AdmissionregistrationV1Api, kind: str):
    if kind == "MutatingWebhookConfiguration":
        return (
            api.read_mutating_webhook_configuration,
            api.create_mutating_webhook_configuration,
            api.replace_mutating_webhook_configuration,
            api.delete_mutating_webhook_configuration,
        )
    return (
        api.read_validating_webhook_configuration,
        api.create_validating_webhook_configuration,
        api.replace_validating_webhook_configuration,
        api.delete_validating_webhook_configuration,
    )


def apply(api_client, configurations: list[dict]) -> None:
    """Creates the configurations, or replaces ones of the same name left by an earlier run."""
    api = client.AdmissionregistrationV1Api(api_client)
    for configuration in configurations:
        read, create, replace, _ = _api_calls(api, configuration["kind"])
        name = configuration["metadata"]["name"]
        try:
            current = read(name)
        except ApiException as err:
            if err.status != 404:
                raise
            create(configuration)
            continue
        configuration["metadata"]["resourceVersion"] = current.metadata.resource_version
        replace(name, configuration)


def delete(api_client, name: str) -> None:
    """Deletes both configurations called `name`; fine when they are gone already."""
    api = client.AdmissionregistrationV1Api(api_client)
    for kind in KINDS:
        ignoring_not_found(_api_calls(api, kind)[3], name)


def wait_until_called(api_client, namespace: str, scheduler_name: str = SCHEDULER_NAME) -> None:
    """Waits until the API server sends our pods through the webhook.

    The API server picks up a new configuration from its own watch, a moment
    after it is created. A server-side dry run of a pod (sideEffects: None
    allows it) goes through admission without storing anything: once the
    answer carries the entry that reads the bind's devices (rendered without
    --api-versions, the configuration sends the webhook every pod of ours that
    lacks it, as on 1.35), the webhook is in the path.
    """
    core = client.CoreV1Api(api_client)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "webhook-probe-0", "annotations": {"gpu-scheduling-map": "0=node1:0"}},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [{"name": "probe", "image": "gpu-scheduler-check:dev"}],
        },
    }

    def probe() -> None:
        try:
            created = core.create_namespaced_pod(namespace, pod, dry_run="All")
        except ApiException as err:
            raise NotYet(f"dry-run create answered {err.status}: {err.body}") from None
        env = created.spec.containers[0].env or []
        if not any(_reads_the_bind(entry) for entry in env):
            raise NotYet(f"the pod came back without the bind's {CUDA_ENV} entry (env {env})")

    wait_for(f"the API server to call the webhook for pods in namespace {namespace}", probe, REGISTRATION_TIMEOUT)


def _reads_the_bind(entry: client.V1EnvVar) -> bool:
    field_ref = entry.value_from.field_ref if entry.value_from else None
    return entry.name == CUDA_ENV and field_ref is not None and field_ref.field_path == DEVICES_FIELD_PATH


@contextmanager
def registered(
    api_client,
    name: str,
    base_url: str,
    ca_bundle: str,
    scheduler_name: str = SCHEDULER_NAME,
    values: tuple[str, ...] = (),
) -> Iterator[None]:
    """The chart's webhook configurations (with `values`, as render() takes them) for a webhook
    at `base_url` that serves the pods of `scheduler_name`, scoped to this run's namespaces
    (RUN_LABEL=RUN_ID) so other suites sharing the cluster never meet it; proven called by the API
    server before the body runs, deleted afterwards."""
    try:
        configurations = render(
            name,
            base_url,
            ca_bundle,
            namespace_label=(RUN_LABEL, RUN_ID),
            scheduler_name=scheduler_name,
            values=values,
        )
        apply(api_client, configurations)
        probe = create_namespace(api_client, "webhook-probe")
        try:
            wait_until_called(api_client, probe, scheduler_name)
        finally:
            delete_namespace(api_client, probe)
        yield
    finally:
        delete(api_client, name)
