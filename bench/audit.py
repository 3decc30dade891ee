"""The bindings kube-apiserver's audit log has for some pods: who posted each and what it answered.

The local control plane audits every pods/binding request (cluster/local/audit-policy.yaml),
so when a run leaves a pod unbound this says, without trusting any runner's own log, whether
the runner never asked to bind it, or asked and was refused, or was answered 201. Pod names
repeat from run to run, so only requests received since the run began are counted.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from .paths import LOCAL_CLUSTER_DIR


def audit_log_path() -> Path | None:
    """The local cluster's audit log, None when the cluster is not one scripts/local-up.sh made."""
    logs = sorted(LOCAL_CLUSTER_DIR.glob("clusters/*/logs/audit.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def _received(event: dict) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def bindings_of(path: Path, namespace: str, names: set[str], since: datetime) -> dict[str, list[dict]]:
    """name -> every binding request for it received since `since`, in order: the client's user
    agent, when, and the code answered (None if the log has no answer)."""
    requests: dict[str, dict] = {}
    with path.open(errors="replace") as lines:
        for line in lines:
            if '"binding"' not in line or f'"{namespace}"' not in line:
                continue  # cheap filter before parsing
            try:
                event = json.loads(line)
            except ValueError:
                continue  # the last line, half written
            ref = event.get("objectRef") or {}
            if ref.get("subresource") != "binding" or ref.get("namespace") != namespace:
                continue
            if ref.get("name") not in names or _received(event) < since:
                continue
            request = requests.setdefault(
                event["auditID"],
                {
                    "name": ref["name"],
                    "by": event.get("userAgent", ""),
                    "at": event["requestReceivedTimestamp"],
                    "code": None,
                },
            )
            if event.get("stage") == "ResponseComplete":
                request["code"] = (event.get("responseStatus") or {}).get("code")
    found: dict[str, list[dict]] = {name: [] for name in names}
    for request in sorted(requests.values(), key=lambda r: r["at"]):
        found[request.pop("name")].append(request)
    return found
