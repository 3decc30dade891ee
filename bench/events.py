"""The Scheduled Events a run's pods got inside its measured window, counted from the API.

A scheduler tells users where a pod went with an Event (reason Scheduled) on the pod. Sending
them costs the scheduler and the control plane work, and a scheduler that sends them late (or
not at all) looks cheaper and faster than one that sends them on time: at 5,000 nodes
gpu-scheduler sent 0.2-0.3 Scheduled Events per pod inside the window against kube-scheduler's
1.0 (issue 47). So each run counts them: right after the CPU window closes, the bench lists the
namespace's Events with reason Scheduled (the core/v1 view, which also holds the Events posted
through events.k8s.io/v1, as kube-scheduler and gpu-scheduler post them) and counts those about
the run's own pods whose time falls inside the window. Events of an earlier run's pods of the
same names are older than the window, and any posted after it closed are not counted: "inside
the window" is the point.
"""

from __future__ import annotations

import math
from datetime import datetime
from urllib.parse import urlencode

REASON = "Scheduled"


def _seconds(stamp: str | None) -> float | None:
    """A metav1.Time or MicroTime (RFC 3339, "Z" or an offset, with or without a fraction) as Unix time."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def event_time(event: dict) -> float | None:
    """When the Event was sent: its eventTime (events.k8s.io's, microseconds), else its
    firstTimestamp (core's, seconds), else when the apiserver stored it."""
    for stamp in (
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        seconds = _seconds(stamp)
        if seconds is not None:
            return seconds
    return None


def occurrences(event: dict) -> int:
    """How many times the Event happened: a series' count, core's count, else once."""
    series = event.get("series") or {}
    return int(series.get("count") or event.get("count") or 1)


def scheduled_in_window(events: list[dict], names: set[str], start: float, end: float) -> dict:
    """The Scheduled Events about the pods `names` sent between start and end (Unix times; widened
    to whole seconds, as a core Event's time has no fraction): how many in all, and how many of
    the pods got at least one."""
    low, high = math.floor(start), math.ceil(end)
    per_pod: dict[str, int] = {}
    for event in events:
        about = event.get("involvedObject") or event.get("regarding") or {}
        if event.get("reason") != REASON or about.get("kind", "Pod") != "Pod" or about.get("name") not in names:
            continue
        sent = event_time(event)
        if sent is None or not low <= sent <= high:
            continue
        per_pod[about["name"]] = per_pod.get(about["name"], 0) + occurrences(event)
    return {"scheduled_events": sum(per_pod.values()), "pods_with_scheduled_event": len(per_pod)}


def fetch(api, namespace: str, page: int = 500) -> list[dict]:
    """The namespace's Events with reason Scheduled, every page of them."""
    events, token = [], ""
    while True:
        query = {"fieldSelector": f"reason={REASON}", "limit": str(page), **({"continue": token} if token else {})}
        answer = api.get(f"/api/v1/namespaces/{namespace}/events?{urlencode(query)}")
        events += answer.get("items") or []
        token = (answer.get("metadata") or {}).get("continue") or ""
        if not token:
            return events


def figures(api, namespace: str, names: list[str], start: float, end: float) -> dict:
    """A run's Scheduled Event figures (scheduled_in_window), or the error that kept them from being read."""
    try:
        return scheduled_in_window(fetch(api, namespace), set(names), start, end)
    except Exception as err:  # noqa: BLE001 - a figure not read is shown as not measured, the run goes on
        return {"scheduled_events_error": " ".join(str(err).split())[:200]}
