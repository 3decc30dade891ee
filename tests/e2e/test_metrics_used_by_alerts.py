"""Every metric the chart's alerts and dashboard query is one our processes really expose.

An alert on a misspelt or renamed metric never fires, and promtool cannot tell: its unit tests
(tests/delivery/test_prometheus_rules.py) feed the series their author believed in. Here the
names come from the rules as `helm template` renders them (monitoring.prometheusRule) and
from the dashboard's queries (charts/gpu-scheduler/dashboards/gpu-scheduler.json, its
variables too), and are looked up in what /metrics of the running scheduler and webhook (this
suite's processes) serve. A histogram is matched through its _bucket, _sum and _count series,
a counter through _total; a family with no sample yet (no GPU held) still counts, since its
HELP and TYPE are served.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .charts import SCHEDULER_CHART, helm_template

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

DASHBOARD = SCHEDULER_CHART / "dashboards" / "gpu-scheduler.json"
# Written by Prometheus itself for every target it scrapes; no exporter serves it.
PROMETHEUS_OWN = {"up"}
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
SERIES_OF = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label
    matchers, ranges and label lists are taken out, and function names (followed by a
    parenthesis) and keywords skipped."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    found = re.finditer(r"(?<![\w$.:])([a-zA-Z_:][\w:]*)\s*(\()?", expr)
    return {m.group(1) for m in found if not m.group(2) and m.group(1) not in PROMQL_WORDS}


def rule_queries() -> dict[str, str]:
    """Alert name (and severity) -> expression, as the chart renders them."""
    documents = helm_template(
        "gpu-scheduler",
        SCHEDULER_CHART,
        "gpu-scheduler-system",
        "--set",
        "monitoring.prometheusRule.enabled=true",
        # The webhook's alerts are rendered only where the webhook is scraped.
        "--set",
        "metrics.serviceMonitor.enabled=true",
    )
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    return {
        f"alert {r['alert']} ({r['labels']['severity']})": r["expr"]
        for group in rule["spec"]["groups"]
        for r in group["rules"]
    }


def dashboard_queries() -> dict[str, str]:
    """Panel title (and refId) or variable name -> query."""
    dashboard = json.loads(DASHBOARD.read_text())
    queries = {
        f"panel {p['title']!r} {t['refId']}": t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])
    }
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            # label_values(<series selector>, <label>): the label is no metric.
            query = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", variable["query"]["query"])
            queries[f"variable ${variable['name']}"] = query
    return queries


def exposed(url: str, context: ssl.SSLContext | None = None) -> set[str]:
    """Every series name /metrics at `url` serves, and those of its families with no sample yet."""
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        text = response.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(sample.name for sample in family.samples)
        names.update(family.name + suffix for suffix in SERIES_OF.get(family.type, ("",)))
    return names


def test_the_name_reader_finds_metrics_and_nothing_else():
    expr = (
        'histogram_quantile(0.99, sum by (le, operation) (rate(a_seconds_bucket{job="x", le=~"1.*"}[5m])))'
        " > 2.5e3 or absent(up{job='y'}) unless on (job) group_left () b_total offset 1h * 86400"
        ' and max without (instance) (c:recorded{x="sum(d)"}) == bool 1'
    )

    assert metric_names(expr) == {"a_seconds_bucket", "up", "b_total", "c:recorded"}


def test_every_metric_the_alerts_and_dashboard_use_is_exposed(product):
    webhook, scheduler = product
    served = exposed(f"{scheduler.base_url}/metrics")
    served |= exposed(f"{webhook.base_url}/metrics", ssl.create_default_context(cafile=str(webhook.certs.ca_file)))
    used: dict[str, list[str]] = {}
    for where, query in {**rule_queries(), **dashboard_queries()}.items():
        for name in metric_names(query):
            used.setdefault(name, []).append(where)

    missing = {name: places for name, places in sorted(used.items()) if name not in served | PROMETHEUS_OWN}

    ours = sorted(n for n in served if n.startswith("gpu_scheduler_"))
    assert not missing, f"used but not served by the scheduler or the webhook: {missing}\nserved: {ours}"
    # The reader saw the queries: the scheduler's and the webhook's metrics are both in use.
    assert {"gpu_scheduler_leader", "gpu_scheduler_webhook_certificate_remaining_seconds", "up"} <= set(used)
    assert len(used) >= 12, sorted(used)
