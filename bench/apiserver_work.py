"""What a burst asked of the apiserver, per pod bound, from the apiserver's own counters.

The CPU figures say how hard the control plane worked for each contender; these say
for what: the requests it served by verb and resource, the watch events it sent, the
operations it sent etcd, and its admission work (webhook calls, admission policy
evaluations, passes through the admission chain). They are read from kube-apiserver's /metrics just before
the first pod is created and again once the burst has settled, the same window as
the CPU, and come from the apiserver, not from the scheduler under test. The bench's
own requests (the creates, the watch that sees binds) are in every contender's
figures alike, so the differences between contenders are the schedulers' own.
"""

from __future__ import annotations

from .prometheus import samples

# Below this, a row is noise of the window (a lease renewal, a controller's resync), not per-pod work.
SHOWN_PER_POD = 0.05


def _resource(labels: dict[str, str]) -> str:
    # "events" (core/v1) and "events.events.k8s.io" are different APIs with the same resource name.
    group = labels.get("group", "")
    return labels.get("resource", "") + (f".{group}" if group else "")


def _request_name(labels: dict[str, str]) -> str:
    resource, subresource = _resource(labels), labels.get("subresource", "")
    if not resource:
        return f"{labels.get('verb', '')} {subresource}"  # a path such as /readyz
    return f"{labels.get('verb', '')} {resource}" + (f"/{subresource}" if subresource else "")


# What admission did, named so that admission_per_pod() can add them up.
WEBHOOK_CALLS = "admission webhook call"
POLICY_CHECKS = "admission policy check"
ADMISSION_STEPS = "admission step"

# counter -> how a sample's labels name what was counted
_COUNTERS = {
    "apiserver_request_total": _request_name,
    "apiserver_watch_events_total": lambda labels: f"watch event {_resource(labels)}",
    "etcd_requests_total": lambda labels: f"etcd {labels.get('operation', '')} {_resource(labels)}",
    # Admission, from the apiserver's own histograms and counters: each call to a webhook (by its name
    # and type), each evaluation of a ValidatingAdmissionPolicy or MutatingAdmissionPolicy (by policy),
    # and each pass of a request through the admission chain (by step type and operation; a
    # pods/binding POST is a CREATE too).
    "apiserver_admission_webhook_admission_duration_seconds_count": lambda labels: (
        f"{WEBHOOK_CALLS} {labels.get('type', '')} {labels.get('name', '')}"
    ),
    "apiserver_validating_admission_policy_check_total": lambda labels: (
        f"{POLICY_CHECKS} validating {labels.get('policy', '')}"
    ),
    "apiserver_mutating_admission_policy_check_total": lambda labels: (
        f"{POLICY_CHECKS} mutating {labels.get('policy', '')}"
    ),
    "apiserver_admission_step_admission_duration_seconds_count": lambda labels: (
        f"{ADMISSION_STEPS} {labels.get('type', '')} {labels.get('operation', '')}"
    ),
}


def read_counters(exposition: str) -> dict[str, float]:
    """The counted things of one /metrics text, summed over the labels left out of their names
    (response code, scope, version, ...)."""
    counts: dict[str, float] = {}
    for name, labels, value in samples(exposition):
        if name in _COUNTERS:
            what = _COUNTERS[name](labels)
            counts[what] = counts.get(what, 0.0) + value
    return counts


def per_pod(before: dict[str, float], after: dict[str, float], pods: int) -> dict[str, float]:
    """How many of each counted thing the window added, per pod bound. A counter that went
    down means the apiserver restarted in the window: the figures would be wrong, so none."""
    if pods <= 0:
        return {}
    added = {what: after[what] - before.get(what, 0.0) for what in after}
    if any(value < 0 for value in added.values()) or any(what not in after for what in before):
        raise ValueError("kube-apiserver's counters went back during the burst: it restarted, no figures")
    return {what: value / pods for what, value in sorted(added.items()) if value}


def admission_per_pod(counted: dict[str, float]) -> dict[str, float]:
    """From one run's figures per pod (per_pod): the webhook calls and the admission policy
    evaluations per pod, all webhooks and policies together."""
    return {
        "webhook_calls": sum(v for what, v in counted.items() if what.startswith(WEBHOOK_CALLS + " ")),
        "policy_checks": sum(v for what, v in counted.items() if what.startswith(POLICY_CHECKS + " ")),
    }


def fetch(api) -> dict[str, float]:
    """The counters now, from the apiserver the bench's KubeApi reaches."""
    status, body = api.request("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics from kube-apiserver: HTTP {status}: {body[:200]!r}")
    return read_counters(body.decode())


def shown_rows(per_runner: dict[str, dict[str, float]]) -> list[str]:
    """The counted things worth a row: at least SHOWN_PER_POD per pod for some runner,
    requests first, then watch events, then etcd, each by name."""
    names = {what for counts in per_runner.values() for what, value in counts.items() if value >= SHOWN_PER_POD}

    def order(what: str) -> tuple[int, str]:
        kind = (
            3
            if what.startswith("admission ")
            else 2
            if what.startswith("etcd ")
            else 1
            if what.startswith("watch event ")
            else 0
        )
        return kind, what

    return sorted(names, key=order)
