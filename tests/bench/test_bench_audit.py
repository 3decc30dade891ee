"""The audit log reader of an incomplete run's diagnosis, on lines kube-apiserver v1.34.10 wrote.

data/audit-bindings.log was recorded on 2026-12-02 from the local control plane with
cluster/local/audit-policy.yaml: `kubectl create --raw .../pods/<name>/binding` for p-1 (201),
p-1 again (409, already assigned) and p-3 (404, no such pod), at 01:12:09-10 UTC.
"""

from datetime import UTC, datetime
from pathlib import Path

from bench.audit import bindings_of

LOG = Path(__file__).parent / "data" / "audit-bindings.log"
BEFORE = datetime(2026, 12, 2, 1, 12, tzinfo=UTC)
KUBECTL = "kubectl/v1.34.5 (linux/amd64) kubernetes/ebfac05"


def test_each_binding_request_of_a_pod_is_counted_once_with_its_answer():
    found = bindings_of(LOG, "gpu-bench", {"p-1", "p-2", "p-3"}, BEFORE)
    assert [(b["by"], b["code"]) for b in found["p-1"]] == [(KUBECTL, 201), (KUBECTL, 409)]
    assert [b["code"] for b in found["p-3"]] == [404]
    assert found["p-2"] == []  # created, never bound: no request at all
    assert found["p-1"][0]["at"] < found["p-1"][1]["at"]


def test_requests_before_the_run_or_of_another_namespace_are_not_counted():
    assert bindings_of(LOG, "gpu-bench", {"p-1"}, datetime(2026, 12, 2, 2, 0, tzinfo=UTC)) == {"p-1": []}
    assert bindings_of(LOG, "elsewhere", {"p-1"}, BEFORE) == {"p-1": []}
