"""`make report`'s engine, scripts/report.py, on the cluster the suite runs against.

Where the nodes run containers (KinD) the logs in the report must be the
pods' own `kubectl logs`, with nothing simulated; only on KWOK fake nodes
may the report run the check on this host, and then it must say so.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from .cluster import create, kwok_fake_nodes, node_aliases, pod_log, wait_for_pods
from .components import REPO
from .waiting import NotYet, wait_for
from .workloads import TASK_EXPECTED, check_chart

pytestmark = pytest.mark.e2e

CHECK_PODS = "app.kubernetes.io/name=gpu-scheduler-check"
SIMULATED_NOTE = "These lines were produced by this report, not by the pods."


def test_report_shows_the_check_pods_on_node3_and_node4_with_real_logs_wherever_containers_run(
    api_client, kubeconfig, product, ns, tmp_path
):
    create(api_client, ns, check_chart(ns))
    pods = wait_for_pods(api_client, ns, 5, timeout=120, label_selector=CHECK_PODS)
    fake = kwok_fake_nodes(api_client)
    aliases = node_aliases(api_client)
    on_log_nodes = [p for p in pods if aliases[p["spec"]["nodeName"]] in ("node3", "node4")]
    for pod in on_log_nodes:
        if pod["spec"]["nodeName"] not in fake:
            name = pod["metadata"]["name"]

            def logged(name=name) -> None:
                if " node=" not in pod_log(api_client, ns, name, "check"):
                    raise NotYet("no tick logged yet")

            wait_for(f"a tick in the log of {ns}/{name}", logged, timeout=60)
    out = tmp_path / "report.md"

    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), str(REPO / "scripts" / "report.py"), "--namespace", ns, "--out", out],
        env={**os.environ, "KUBECONFIG": kubeconfig},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stdout + result.stderr
    report = out.read_text()
    print("\n" + report)
    assert "**PASS: 5/5 pods placed as the map says**" in report
    assert [p["metadata"]["name"] for p in on_log_nodes] == [
        "gpu-scheduler-check-2",
        "gpu-scheduler-check-3",
        "gpu-scheduler-check-4",
    ]
    for pod in on_log_nodes:
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        expected = TASK_EXPECTED[int(name.rsplit("-", 1)[1])]
        section = report.split(f"### {name} on {node}\n", 1)[1].split("\n### ", 1)[0]
        source = "gpu-scheduler-check --once" if node in fake else "kubectl logs"
        assert section.startswith(f"\nSource: `{source}`"), section
        assert re.search(rf"pod={name} index=\d+ node={node} CUDA_VISIBLE_DEVICES={expected.devices} ", section), (
            section
        )
    assert (SIMULATED_NOTE in report) == bool(fake)
