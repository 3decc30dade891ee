"""The operator's view: the chart's alerts (monitoring.prometheusRule) and Grafana dashboard
(monitoring.grafanaDashboard), as `helm template` renders them.

The alerts go through the real promtool (scripts/promtool.sh: Prometheus' release, or built
from its Go module): `promtool check rules` parses every expression and annotation template,
and `promtool test rules` runs testdata/prometheus/alerts_test.yaml, where each alert is seen
firing and not firing on series like the ones our /metrics expose. That those metric names are
really exposed is proven against running processes in tests/e2e/test_metrics_used_by_alerts.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
from commands import run, tail

from .conftest import REPO, SCHEDULER_CHART, fake_curl

pytestmark = pytest.mark.delivery

TESTDATA = Path(__file__).parent / "testdata" / "prometheus"
UNIT_TESTS = TESTDATA / "alerts_test.yaml"
DASHBOARD = SCHEDULER_CHART / "dashboards" / "gpu-scheduler.json"
TROUBLESHOOTING = REPO / "docs" / "troubleshooting.md"
RUNBOOK = "https://docs.example.com/troubleshooting.md"
RULES_ON = "monitoring.prometheusRule.enabled=true"
DASHBOARD_ON = "monitoring.grafanaDashboard.enabled=true"
MONITORS_ON = "metrics.serviceMonitor.enabled=true"
# What alerts_test.yaml was written for (its header says so): the webhook scraped, so its
# alerts are rendered too.
UNIT_TEST_SETS = (RULES_ON, MONITORS_ON, f"monitoring.prometheusRule.runbookURL={RUNBOOK}")
SEVERITIES = {"critical", "warning"}


@pytest.fixture(scope="session")
def promtool() -> Path:
    # A cold machine builds it (minutes); `make test` gets it ready beforehand.
    result = run(["bash", REPO / "scripts" / "promtool.sh"], timeout=1500)
    if result.returncode != 0:
        pytest.fail(f"scripts/promtool.sh found no promtool:\n{tail(result)}", pytrace=False)
    return Path(result.stdout.strip().splitlines()[-1])


def prometheus_rule(rendered) -> dict:
    (rule,) = rendered.of_kind("PrometheusRule")
    return rule


def alerting_rules(rule: dict) -> list[dict]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def write_rules(rule: dict, directory: Path) -> Path:
    """The groups as a Prometheus rule file, the way the Prometheus Operator hands them over."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub and GitLab give a file's headings: lower case, punctuation dropped,
    spaces as hyphens."""
    headings = re.findall(r"^#+\s+(.+?)\s*$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_nothing_for_prometheus_or_grafana_is_rendered_by_default(render):
    rendered = render(SCHEDULER_CHART)

    assert rendered.of_kind("PrometheusRule") == []
    assert [d["metadata"]["name"] for d in rendered.of_kind("ConfigMap") if "dashboard" in d["metadata"]["name"]] == []


def test_promtool_check_rules_accepts_every_expression_and_template(render, promtool, tmp_path):
    rules = write_rules(prometheus_rule(render(SCHEDULER_CHART, *UNIT_TEST_SETS)), tmp_path)

    result = run([promtool, "check", "rules", "--lint=all", "--lint-fatal", rules])

    assert result.returncode == 0, tail(result)
    assert "SUCCESS: 13 rules found" in result.stdout, result.stdout


def test_every_alert_fires_and_stays_quiet_in_promtools_unit_tests(render, promtool, tmp_path):
    write_rules(prometheus_rule(render(SCHEDULER_CHART, *UNIT_TEST_SETS)), tmp_path)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)

    result = run([promtool, "test", "rules", UNIT_TESTS.name], cwd=tmp_path)

    assert result.returncode == 0, tail(result)
    assert "SUCCESS" in result.stdout, result.stdout


def test_the_unit_tests_see_every_alert_and_severity_fire_and_stay_quiet(render):
    rules = alerting_rules(prometheus_rule(render(SCHEDULER_CHART, *UNIT_TEST_SETS)))
    checks = [c for t in yaml.safe_load(UNIT_TESTS.read_text())["tests"] for c in t["alert_rule_test"]]

    fired = {(c["alertname"], a["exp_labels"]["severity"]) for c in checks for a in c["exp_alerts"]}
    quiet = {c["alertname"] for c in checks if not c["exp_alerts"]}

    assert fired == {(r["alert"], r["labels"]["severity"]) for r in rules}
    assert quiet == {r["alert"] for r in rules}


def test_every_alert_has_a_severity_and_says_what_to_check(render):
    rules = alerting_rules(prometheus_rule(render(SCHEDULER_CHART, *UNIT_TEST_SETS)))
    anchors = github_anchors(TROUBLESHOOTING.read_text())

    for rule in rules:
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert len(rule["annotations"]["description"]) > 100, rule["alert"]
        url = rule["annotations"].get("runbook_url")
        if url is None:
            continue
        # A runbook_url leads to a section that exists, and the description names it too.
        page, anchor = url.split("#")
        assert page == RUNBOOK and anchor in anchors, (rule["alert"], url, sorted(anchors))
        assert "docs/troubleshooting.md" in rule["annotations"]["description"], rule["alert"]
    assert sum("runbook_url" in r["annotations"] for r in rules) >= 8


def test_rule_values_reach_the_rendered_rule(render):
    rendered = render(
        SCHEDULER_CHART,
        RULES_ON,
        "monitoring.prometheusRule.namespace=monitoring",
        "monitoring.prometheusRule.labels.release=kube-prometheus-stack",
        "monitoring.prometheusRule.alertLabels.team=gpu-platform",
        'monitoring.prometheusRule.schedulerSelector=job="gpu-scheduler"',
        "monitoring.prometheusRule.thresholds.pendingMinutes=30",
        "monitoring.prometheusRule.thresholds.certificateWarningDays=21",
        "monitoring.prometheusRule.webhookAlerts=false",
        release="gpu",
        namespace="gpus",
    )
    rule = prometheus_rule(rendered)
    rules = {r["alert"]: r for r in alerting_rules(rule)}

    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # Without the webhook scraped, no webhook alert: WebhookDown would fire for ever.
    assert [g["name"] for g in rule["spec"]["groups"]] == ["gpu-scheduler.scheduler"]
    for name, alert in rules.items():
        assert alert["labels"]["team"] == "gpu-platform", name
        selectors = re.findall(r"\{[^}]*\}", alert["expr"])
        assert selectors and all(s.startswith('{job="gpu-scheduler"') for s in selectors), (name, alert["expr"])
    assert rules["GpuSchedulerPodsPending"]["for"] == "30m"
    assert "gpus/gpu" in rules["GpuSchedulerDown"]["annotations"]["summary"]
    assert "runbook_url" not in rules["GpuSchedulerDown"]["annotations"]


def test_the_default_selectors_are_the_jobs_the_prometheus_operator_gives_the_services(render):
    rendered = render(SCHEDULER_CHART, RULES_ON, MONITORS_ON)
    rules = {(r["alert"], r["labels"]["severity"]): r for r in alerting_rules(prometheus_rule(rendered))}

    # The Prometheus Operator names a target's job after the Service it was found through.
    def scraped_service(monitor_name: str) -> dict:
        selected = rendered.one("ServiceMonitor", monitor_name)["spec"]["selector"]["matchLabels"].items()
        (service,) = [s for s in rendered.of_kind("Service") if selected <= s["metadata"]["labels"].items()]
        return service

    scheduler_service = scraped_service("gpu-scheduler-scheduler")
    webhook_service = scraped_service("gpu-scheduler-webhook")

    scheduler_job = f'job="{scheduler_service["metadata"]["name"]}", namespace="gpu-scheduler-system"'
    webhook_job = f'job="{webhook_service["metadata"]["name"]}", namespace="gpu-scheduler-system"'
    assert f"up{{{scheduler_job}}}" in rules["GpuSchedulerDown", "critical"]["expr"]
    assert f"up{{{webhook_job}}}" in rules["GpuSchedulerWebhookDown", "critical"]["expr"]


@pytest.mark.parametrize(
    ("sets", "webhook_alerts"),
    [
        # auto (the default): the webhook's alerts only where the chart's ServiceMonitor scrapes
        # it; unscraped, GpuSchedulerWebhookDown would fire for ever.
        ((), False),
        ((MONITORS_ON,), True),
        # true: the user scrapes the webhook some other way; false: off even when scraped.
        (("monitoring.prometheusRule.webhookAlerts=true",), True),
        ((MONITORS_ON, "monitoring.prometheusRule.webhookAlerts=false"), False),
    ],
    ids=["auto-unscraped", "auto-scraped", "true", "false"],
)
def test_webhook_alerts_only_where_the_webhook_is_scraped(render, sets, webhook_alerts):
    groups = [g["name"] for g in prometheus_rule(render(SCHEDULER_CHART, RULES_ON, *sets))["spec"]["groups"]]

    assert ("gpu-scheduler.webhook" in groups) is webhook_alerts, groups
    assert "gpu-scheduler.scheduler" in groups


def test_dashboard_is_json_whose_every_panel_has_a_query():
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]

    assert len(panels) >= 10
    for panel in panels:
        exprs = [t.get("expr", "").strip() for t in panel.get("targets", [])]
        assert exprs and all(exprs), panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"]), panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace", "scheduler", "webhook"}
    titles = " / ".join(p["title"] for p in panels).lower()
    for what in ("placement", "pending", "gpus held", "gpu holders", "admission latency", "leader", "certificate"):
        assert what in titles, (what, titles)


def test_dashboard_configmap_carries_the_sidecar_label_and_the_file(render):
    default = render(SCHEDULER_CHART, DASHBOARD_ON).one("ConfigMap", "gpu-scheduler-dashboard")
    custom = render(
        SCHEDULER_CHART,
        DASHBOARD_ON,
        "monitoring.grafanaDashboard.namespace=grafana",
        "monitoring.grafanaDashboard.labels.grafana_dashboard=null",
        "monitoring.grafanaDashboard.labels.dashboards=gpu",
        "monitoring.grafanaDashboard.annotations.grafana_folder=GPU",
    ).one("ConfigMap", "gpu-scheduler-dashboard")

    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert default["metadata"]["namespace"] == "gpu-scheduler-system"
    assert json.loads(default["data"]["gpu-scheduler.json"]) == json.loads(DASHBOARD.read_text())
    assert custom["metadata"]["namespace"] == "grafana"
    assert "grafana_dashboard" not in custom["metadata"]["labels"]
    assert custom["metadata"]["labels"]["dashboards"] == "gpu"
    assert custom["metadata"]["annotations"] == {"grafana_folder": "GPU"}


# -- scripts/promtool.sh: the release's promtool, taken only with its published sha256 -------------
# Our machines reach no GitHub: a fake `curl` serves a release folder of the test's making,
# whose tarball holds a stand-in promtool that reports the version, so that the checksum is
# the only thing that can refuse it. No Go on PATH: the build fallback cannot hide a refusal.

SCRIPT = REPO / "scripts" / "promtool.sh"
SCRIPT_TOOLS = (
    "awk", "basename", "cat", "chmod", "cp", "cut", "dirname", "flock", "gzip", "head", "ln", "mkdir",
    "mv", "rm", "seq", "sha256sum", "sleep", "tar", "touch", "uname",
)  # fmt: skip
# Serves $FAKE_RELEASE/<the URL's file name>, or fails like curl on a missing file.
FAKE_CURL = fake_curl(r"""cp "$FAKE_RELEASE/${url##*/}" "$out" 2>/dev/null || exit 22
""")


def prometheus_version() -> str:
    module = re.search(
        r"github\.com/prometheus/prometheus (v0\.(\d+)\.(\d+))",
        (REPO / "cluster" / "prometheus" / "go.mod").read_text(),
    )
    assert module, "cluster/prometheus/go.mod requires no github.com/prometheus/prometheus"
    minor = int(module.group(2))
    return f"{minor // 100}.{minor % 100}.{module.group(3)}"


def run_script(tmp_path: Path, release: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    system = tmp_path / "system"
    if not system.exists():
        system.mkdir()
        for tool in SCRIPT_TOOLS:
            (system / tool).symlink_to(shutil.which(tool))
        (system / "curl").write_text(FAKE_CURL)
        (system / "curl").chmod(0o755)
    calls = tmp_path / "curl-calls"
    result = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={
            "PATH": str(system),
            "HOME": str(tmp_path / "home"),
            "CACHE_DIR": str(tmp_path / "cache"),
            "GPU_SCHEDULER_STORE": str(tmp_path / "store"),
            "TOOLS_OS": "linux",
            "TOOLS_ARCH": "arm64",
            "FAKE_RELEASE": str(release),
            "FAKE_CURL_CALLS": str(calls),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result, calls.read_text().split() if calls.exists() else []


def release_folder(tmp_path: Path, published_sha256: str | None = None) -> Path:
    """A release's files for linux/arm64: the tarball with a stand-in promtool, and sha256sums.txt
    (with the tarball's real sha256 unless another is given)."""
    version = prometheus_version()
    folder, top = tmp_path / "release", f"prometheus-{version}.linux-arm64"
    (folder / top).mkdir(parents=True)
    promtool = folder / top / "promtool"
    promtool.write_text(f'#!/bin/sh\necho "promtool, version {version} (branch: HEAD, revision: stand-in)"\n')
    promtool.chmod(0o755)
    tarball = folder / f"{top}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(folder / top, arcname=top)
    digest = published_sha256 or hashlib.sha256(tarball.read_bytes()).hexdigest()
    (folder / "sha256sums.txt").write_text(
        f"{'0' * 64}  prometheus-{version}.linux-amd64.tar.gz\n{digest}  {tarball.name}\n"
    )
    return folder


def test_the_release_promtool_is_kept_when_its_sha256_is_the_published_one(tmp_path):
    version = prometheus_version()

    result, calls = run_script(tmp_path, release_folder(tmp_path))

    assert result.returncode == 0, result.stderr
    base = f"https://github.com/prometheus/prometheus/releases/download/v{version}"
    assert calls == [f"{base}/sha256sums.txt", f"{base}/prometheus-{version}.linux-arm64.tar.gz"]
    linked = tmp_path / "cache" / "bin" / "promtool"
    assert result.stdout.strip() == str(linked)
    assert linked.resolve() == (tmp_path / "store" / "tools" / f"promtool-{version}-release-linux-arm64" / "promtool")
    # Only the binary stays, and a second run takes it without a download.
    assert sorted(p.name for p in linked.resolve().parent.iterdir()) == [".complete", "promtool", "sha256sums.txt"]
    again, calls_again = run_script(tmp_path, release_folder(tmp_path / "unused"))
    assert again.returncode == 0 and calls_again == calls, again.stderr


def test_a_release_tarball_without_the_published_sha256_is_refused_and_not_kept(tmp_path):
    result, calls = run_script(tmp_path, release_folder(tmp_path, published_sha256="f" * 64))

    assert result.returncode != 0
    assert len(calls) == 2
    assert f"does not have the sha256 its release publishes ({'f' * 64}): not used" in result.stderr
    assert "install it (https://prometheus.io/download/" in result.stderr
    assert not (tmp_path / "cache" / "bin" / "promtool").exists()
    assert [p.name for p in (tmp_path / "store" / "tools").iterdir() if not p.name.endswith(".lock")] == []
