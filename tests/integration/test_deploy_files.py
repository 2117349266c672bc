"""The files in deploy/ and docker-compose.yml, checked by the tools that will consume them.

promtool parses the Prometheus configuration and rules and runs the rules' unit tests;
docker-compose parses the compose file; systemd-analyze verifies the units; the Kubernetes
manifests are parsed and cross-checked (and rendered by ``kubectl kustomize`` where kubectl is
installed: Debian's kubernetes-client conflicts with the upstream kubectl package, so CI does
not install it). Every metric that a dashboard panel or an alert names must be one the
crawler exports, and every CRAWLER_* variable the files set must be a real setting.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from toolcheck import require_tool

from crawler.metrics import Metrics, exported_names
from crawler.settings import Settings, env_name

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "crawler.json"
K8S = DEPLOY / "kubernetes"

# PromQL words that are neither metrics nor followed by "(" in every use.
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
    "bool", "offset", "inf", "nan",
}
REQUIRED_ALERTS = {
    "CrawlerDown", "CrawlerFreshnessBelowTarget", "CrawlerBudgetUnderused",
    "CrawlerErrorRateHigh", "CrawlerOverdueBacklogGrowing",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, labels and keywords removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range and subquery selectors
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[match.end():].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group().lower() not in PROMQL_WORDS:
            names.add(match.group())
    return names


def exported() -> set[str]:
    return exported_names(Metrics().registry)


def run(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


def load_yaml(path: Path) -> list[Any]:
    """All YAML documents of a file, parsed by the PyYAML that Debian's docker-compose ships."""
    require_tool("docker-compose", "docker-compose")
    script = "import json, sys, yaml; json.dump(list(yaml.safe_load_all(sys.stdin)), sys.stdout)"
    result = subprocess.run(["/usr/bin/python3", "-c", script], input=path.read_text(),
                            capture_output=True, text=True, timeout=30, check=True)
    documents: list[Any] = json.loads(result.stdout)
    return documents


# --- the PromQL name extraction itself ------------------------------------------------------


def test_metric_names_of_promql() -> None:
    assert metric_names(
        'histogram_quantile(0.95, sum by (le) (rate(crawler_fetch_duration_seconds_bucket[5m])))'
    ) == {"crawler_fetch_duration_seconds_bucket"}
    assert metric_names(
        'sum(rate(crawler_fetches_total{outcome=~"timeout|x"}[15m])) / sum(rate(a_b[1h] offset 5m))'
        " > 1e3 and on(instance) up == 0"
    ) == {"crawler_fetches_total", "a_b", "up"}
    assert metric_names("deriv(max(crawler_urls_due)[30m:1m]) > 0") == {"crawler_urls_due"}
    assert metric_names("time() - max(crawler_x)") == {"crawler_x"}


# --- Prometheus ------------------------------------------------------------------------------


def test_promtool_accepts_config_and_rules() -> None:
    promtool = require_tool("promtool", "prometheus")
    config = run(promtool, "check", "config", "prometheus.yml", cwd=PROMETHEUS)
    assert config.returncode == 0, config.stdout + config.stderr
    rules = run(promtool, "check", "rules", "alerts.yml", cwd=PROMETHEUS)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS" in rules.stdout and "WARNING" not in rules.stdout + rules.stderr


def test_alert_rules_fire_when_they_should() -> None:
    promtool = require_tool("promtool", "prometheus")
    result = run(promtool, "test", "rules", "alerts_test.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_name_only_exported_metrics() -> None:
    (document,) = load_yaml(PROMETHEUS / "alerts.yml")
    rules = [rule for group in document["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in rules} >= REQUIRED_ALERTS
    known = exported() | {"up"}
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= known, (rule["alert"], names - known)
        assert rule["annotations"]["summary"], rule["alert"]


# --- Grafana ---------------------------------------------------------------------------------


def test_dashboard_queries_name_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    known = exported()
    used: set[str] = set()
    for panel in panels:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            assert names, (panel["title"], target["expr"])
            assert names <= known, (panel["title"], names - known)
            used |= names
        assert panel["datasource"]["uid"] == "prometheus", panel["title"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("throughput", "outcomes", "freshness", "budget", "μ", "backlog"):
        assert topic in titles, topic
    assert {"crawler_fetches_total", "crawler_collection_freshness_ratio",
            "crawler_planner_mu", "crawler_planner_budget_fetches_per_second",
            "crawler_urls_due"} <= used
    assert len({p["id"] for p in panels}) == len(panels)


def test_grafana_provisioning_points_at_the_dashboard() -> None:
    provisioning = DEPLOY / "grafana" / "provisioning"
    (datasources,) = load_yaml(provisioning / "datasources" / "prometheus.yml")
    assert [d["uid"] for d in datasources["datasources"]] == ["prometheus"]
    (providers,) = load_yaml(provisioning / "dashboards" / "crawler.yml")
    path = providers["providers"][0]["options"]["path"]
    compose = (ROOT / "docker-compose.yml").read_text()
    assert f"./deploy/grafana/dashboards:{path}:ro" in compose


# --- docker-compose, systemd, Kubernetes -----------------------------------------------------


def test_docker_compose_accepts_the_compose_file() -> None:
    compose = require_tool("docker-compose", "docker-compose")
    result = run(compose, "-f", "docker-compose.yml", "config")
    assert result.returncode == 0, result.stderr
    for service in ("postgres:", "migrate:", "crawler:", "prometheus:", "grafana:"):
        assert f"\n  {service}\n" in result.stdout, service
    assert "CRAWLER_METRICS_HOST: 0.0.0.0" in result.stdout
    assert "service_completed_successfully" in result.stdout


def test_systemd_units_verify() -> None:
    analyze = require_tool("systemd-analyze", "systemd")
    units = DEPLOY / "systemd"
    result = run(analyze, "verify", "crawler.service", "crawler-migrate.service", cwd=units)
    # The units name the installed daemon, which this machine need not have.
    problems = [
        line for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and "/opt/crawler/venv/bin/crawler" not in line
    ]
    assert not problems, problems
    service = (units / "crawler.service").read_text()
    for option in ("ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes",
                   "ExecStart=/opt/crawler/venv/bin/crawler run"):
        assert option in service, option


def test_kubernetes_manifests_render_and_agree() -> None:
    kubectl = shutil.which("kubectl")  # optional: CI does not install it (see below)
    if kubectl is not None:
        rendered = run(kubectl, "kustomize", str(K8S))
        assert rendered.returncode == 0, rendered.stderr
    objects = {
        (doc["kind"], doc["metadata"]["name"]): doc
        for path in sorted(K8S.glob("*.yaml")) if path.name != "kustomization.yaml"
        for doc in load_yaml(path)
    }
    assert {kind for kind, _ in objects} == {
        "ConfigMap", "Job", "Deployment", "Service", "ServiceMonitor"
    }
    deployment = objects["Deployment", "crawler"]
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["run"]
    port = container["ports"][0]
    config = objects["ConfigMap", "crawler-config"]["data"]
    assert int(config["CRAWLER_METRICS_PORT"]) == port["containerPort"]
    assert config["CRAWLER_METRICS_HOST"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port["containerPort"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # The drain (CRAWLER_SHUTDOWN_GRACE) must end before Kubernetes kills the pod.
    assert pod["spec"]["terminationGracePeriodSeconds"] > float(config["CRAWLER_SHUTDOWN_GRACE"])
    job = objects["Job", "crawler-migrate"]["spec"]["template"]["spec"]["containers"][0]
    assert job["args"] == ["db", "upgrade"] and job["image"] == container["image"]
    service = objects["Service", "crawler"]["spec"]
    labels = pod["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()
    assert service["ports"][0]["targetPort"] == port["name"]
    monitor = objects["ServiceMonitor", "crawler"]["spec"]
    assert monitor["endpoints"][0]["port"] == service["ports"][0]["name"]
    assert monitor["selector"]["matchLabels"].items() <= (
        objects["Service", "crawler"]["metadata"]["labels"].items()
    )


def test_files_set_only_real_settings() -> None:
    """A misspelt CRAWLER_* variable is silently ignored by pydantic-settings: catch it here."""
    settings = {env_name(field) for field in Settings.model_fields}
    files = [ROOT / "docker-compose.yml", *DEPLOY.rglob("*")]
    seen = set()
    for path in files:
        if path.is_file() and path.suffix not in {".json"}:
            for name in re.findall(r"\bCRAWLER_[A-Z0-9_]+", path.read_text()):
                assert name in settings, (path.relative_to(ROOT), name)
                seen.add(name)
    assert {"CRAWLER_DATABASE_URL", "CRAWLER_METRICS_HOST"} <= seen
