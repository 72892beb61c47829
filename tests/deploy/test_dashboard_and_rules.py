"""Static checks across the observability artefacts: the Grafana dashboard
is well-formed, and every series that it, the recording and alert rules and
the prometheus-adapter rules read is one the server exports (by the names
fixed in the server interface), a recording rule, or a named external
series. promtool checks syntax; this checks the names, which it cannot."""
import json

import pytest
import yaml

from conftest import DEPLOY
import promql_names
import server_metrics

DASHBOARD = DEPLOY / "grafana" / "normsvc-dashboard.json"
RULE_FILES = sorted((DEPLOY / "prometheus" / "rules").glob("*.yml"))
ADAPTER_RULES = DEPLOY / "k8s" / "monitoring" / "prometheus-adapter-rules.yaml"


def rules():
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            yield from group["rules"]


def recorded_names():
    return {r["record"] for r in rules() if "record" in r}


def known_names():
    return server_metrics.series_names() | recorded_names() | server_metrics.OTHER_SERIES


def dashboard():
    return json.loads(DASHBOARD.read_text())


def panel_targets():
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def test_promql_name_extraction():
    names = promql_names.series_names(
        'sum by (namespace, le) (rate(a_total{code=~"OK|x"}[5m])) / on (pod) b:c:d or c * 0')
    assert names == {"a_total", "b:c:d", "c"}


def test_dashboard_layout():
    dash = dashboard()
    assert dash["uid"] and dash["title"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dash["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {panel['title']} overlaps another"
                cells.add((x, y))
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert variables == {"datasource", "namespace", "pod"}


def test_dashboard_covers_the_operator_questions():
    """Throughput, latency percentiles, queue depth, batch size, bandwidth,
    errors and GPU each have a panel."""
    exprs = " ".join(t["expr"] for _, t in panel_targets())
    for needed in ("normsvc_requests:rate1m", "normsvc_request_duration_seconds:p99_5m",
                   "normsvc_queue_wait_seconds:p99_2m", "normsvc_pending_requests",
                   "normsvc_pending_rows", "normsvc_batch_rows", "normsvc_batch_requests",
                   "normsvc_kernel_bandwidth_bytes_per_second", "normsvc_device_copy_bandwidth",
                   "server_errors:ratio_rate5m", "normsvc_rejected_requests_total",
                   "nv_gpu_utilization", "nv_gpu_memory_used_bytes", "normsvc_batch_stage_seconds"):
        assert needed in exprs, needed


def test_dashboard_reads_known_series():
    known = known_names()
    for panel, target in panel_targets():
        assert target["datasource"]["uid"] == "${datasource}", panel["title"]
        unknown = promql_names.series_names(target["expr"]) - known
        assert not unknown, f"panel {panel['title']!r} reads unknown series {unknown}"


def test_rules_read_known_series():
    known = known_names()
    all_rules = list(rules())
    assert len(all_rules) >= 20
    for rule in all_rules:
        unknown = promql_names.series_names(rule["expr"]) - known
        assert not unknown, f"{rule.get('record') or rule.get('alert')} reads unknown series {unknown}"


def test_alerts_cover_the_issue():
    alerts = {r["alert"] for r in rules() if "alert" in r}
    for needed in ("NormsvcHighRequestLatencyP99", "NormsvcQueueWaitHigh", "NormsvcQueueFull",
                   "NormsvcServerErrorRatio", "NormsvcGpuMemoryHigh", "NormsvcTargetDown"):
        assert needed in alerts
    for rule in rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in {"warning", "critical"}
            assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def adapter_rules():
    return yaml.safe_load(ADAPTER_RULES.read_text())["rules"]


@pytest.mark.parametrize("rule", adapter_rules(), ids=lambda r: r["name"]["as"])
def test_adapter_rules_read_known_series(rule):
    query = (rule["metricsQuery"].replace("<<.GroupBy>>", "pod")
             .replace("<<.LabelMatchers>>", 'pod="x"').replace("<<.Series>>", "x_series"))
    names = promql_names.series_names(query) - {"x_series"}
    assert names and names <= server_metrics.series_names(), names


def test_prometheusrule_carries_the_rule_files_unchanged():
    """prometheusrule.sh (for prometheus-operator) re-indents the rule files;
    the groups it emits must equal theirs, value for value."""
    import subprocess
    out = subprocess.run(["bash", str(DEPLOY / "prometheus" / "prometheusrule.sh"), "monitoring-test"],
                         capture_output=True, text=True, check=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin", "RULE_LABELS": "release: kps"}).stdout
    rule = yaml.safe_load(out)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["metadata"]["namespace"] == "monitoring-test"
    assert rule["metadata"]["labels"]["release"] == "kps"
    expected = [g for path in RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    assert rule["spec"]["groups"] == expected
