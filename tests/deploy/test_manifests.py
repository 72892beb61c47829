"""Renders the Kubernetes overlays and checks them: every object against the
Kubernetes 1.32 API schemas (kubernetes-validate, strict, offline), the
ServiceMonitor against tests/deploy/schemas, and the promises the manifests
make to each other and to the server (ports, probes, drain timing, labels,
autoscaling metrics)."""
import copy
import json
import re

import jsonschema
import kubernetes_validate
import pytest
import yaml

from conftest import K8S, OVERLAYS, one, render, by_kind
import server_metrics

KUBERNETES_VERSION = "1.32.0"
SERVICEMONITOR_SCHEMA = json.loads(
    (K8S.parents[1] / "tests/deploy/schemas/servicemonitor-monitoring-v1.json").read_text())

# Server flags (server interface); each is also read from NORMSVC_<FLAG>.
SERVER_FLAGS = """grpc_address metrics_address backend devices max_batch_rows max_batch_bytes
max_queue_delay_us max_queue_size max_queued_bytes max_hidden_size max_request_rows
max_request_bytes max_receive_message_bytes max_parameter_sets max_parameter_bytes
batches_in_flight idle_spin_us gpu_wait reply_threads timed_batch_interval
staging_buffer_bytes keepalive_time_ms keepalive_timeout_ms
max_connection_age_ms max_connection_age_grace_ms drain_timeout_s log_level""".split()


def validate(obj):
    """Raises if obj does not match its schema; every kind must have one."""
    if obj["kind"] == "ServiceMonitor":
        jsonschema.validate(obj, SERVICEMONITOR_SCHEMA)
        return
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.fixture(scope="module", params=OVERLAYS)
def overlay(request):
    return request.param, render(K8S / "overlays" / request.param)


@pytest.fixture(scope="module")
def monitoring():
    return render(K8S / "monitoring")


def test_every_object_matches_its_schema(overlay, monitoring):
    name, objects = overlay
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(["Namespace", "ConfigMap", "Service", "Service", "Deployment",
                            "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy",
                            "ServiceMonitor"]), name
    for obj in objects + monitoring:
        validate(obj)


@pytest.mark.parametrize("mutate, why", [
    (lambda d: d["spec"]["template"]["spec"]["containers"][0].update(livenessProbes={}),
     "unknown field"),
    (lambda d: d["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["grpc"]
     .update(port="grpc"), "grpc probe port must be a number"),
    (lambda d: d["spec"].update(selector="server"), "wrong type"),
])
def test_validator_rejects_broken_deployments(overlay, mutate, why):
    """The validation above can fail: broken copies of the Deployment are rejected."""
    deployment = copy.deepcopy(one(overlay[1], "Deployment"))
    mutate(deployment)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)


def test_validator_rejects_broken_servicemonitor(overlay):
    monitor = copy.deepcopy(one(overlay[1], "ServiceMonitor"))
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)
    monitor = copy.deepcopy(one(overlay[1], "ServiceMonitor"))
    monitor["spec"]["endpoint"] = monitor["spec"].pop("endpoints")
    with pytest.raises(jsonschema.ValidationError):
        validate(monitor)


def container_of(objects):
    pod = one(objects, "Deployment")["spec"]["template"]
    containers = pod["spec"]["containers"]
    assert len(containers) == 1
    return pod, containers[0]


def config_of(objects):
    """The NORMSVC_* settings the container receives (envFrom ConfigMap + env)."""
    pod, container = container_of(objects)
    settings = {}
    for source in container.get("envFrom", []):
        settings.update(one(objects, "ConfigMap", source["configMapRef"]["name"])["data"])
    for var in container.get("env", []):
        settings[var["name"]] = var["value"]
    return settings


def test_configuration_is_server_flags_through_environment(overlay):
    name, objects = overlay
    settings = config_of(objects)
    known = {"NORMSVC_" + f.upper() for f in SERVER_FLAGS}
    assert set(settings) <= known, f"not server flags: {set(settings) - known}"
    assert int(settings["NORMSVC_MAX_CONNECTION_AGE_MS"]) > 0, "clients must re-resolve"
    assert int(settings["NORMSVC_MAX_CONNECTION_AGE_GRACE_MS"]) > 0
    _, container = container_of(objects)
    assert "args" not in container and "command" not in container, \
        "flags on the command line would override the ConfigMap"
    expected_backend = {"gpu": "cuda", "cpu": "cpu"}[name]
    assert settings["NORMSVC_BACKEND"] == expected_backend


def port_number(container, port_name):
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    return ports[port_name]


def test_listen_addresses_match_container_ports(overlay):
    _, objects = overlay
    settings = config_of(objects)
    _, container = container_of(objects)
    assert settings["NORMSVC_GRPC_ADDRESS"].rsplit(":", 1)[1] == str(port_number(container, "grpc"))
    assert settings["NORMSVC_METRICS_ADDRESS"].rsplit(":", 1)[1] == str(port_number(container, "metrics"))


def test_probes_use_grpc_health(overlay):
    _, objects = overlay
    _, container = container_of(objects)
    grpc_port = port_number(container, "grpc")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == grpc_port, probe
    assert container["readinessProbe"]["grpc"]["service"] == "normsvc.v1.Normalizer"


def test_termination_fits_the_drain(overlay):
    """SIGTERM comes after the preStop sleep; the drain must end before the kill."""
    _, objects = overlay
    pod, container = container_of(objects)
    drain_s = int(config_of(objects)["NORMSVC_DRAIN_TIMEOUT_S"])
    pre_stop_s = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    grace_s = pod["spec"]["terminationGracePeriodSeconds"]
    assert pre_stop_s >= 1
    # The server ends a stop that overruns the drain by 10 s itself (exit 3,
    # logged); the kill must come after that, not before.
    assert grace_s > pre_stop_s + drain_s + 10, (grace_s, pre_stop_s, drain_s)
    # Health is NOT_SERVING during the drain: liveness must not kill first.
    live = container["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > pre_stop_s + drain_s
    # The readiness probe notices the drain well within it.
    ready = container["readinessProbe"]
    assert ready["periodSeconds"] * ready["failureThreshold"] < drain_s


def test_security_context(overlay):
    _, objects = overlay
    pod, container = container_of(objects)
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] != 0
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    assert pod["spec"]["automountServiceAccountToken"] is False


def test_resources_and_gpu(overlay):
    name, objects = overlay
    pod, container = container_of(objects)
    res = container["resources"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(res[kind]), kind
    if name == "gpu":
        assert res["limits"]["nvidia.com/gpu"] >= 1
        assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"]
        assert any(t["key"] == "nvidia.com/gpu" for t in pod["spec"]["tolerations"])
    else:
        assert "nvidia.com/gpu" not in json.dumps(objects)


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def test_topology_spread(overlay):
    _, objects = overlay
    pod, _ = container_of(objects)
    keys = set()
    for constraint in pod["spec"]["topologySpreadConstraints"]:
        assert selects(constraint["labelSelector"]["matchLabels"], pod["metadata"]["labels"])
        keys.add(constraint["topologyKey"])
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}


def test_services(overlay):
    _, objects = overlay
    pod, container = container_of(objects)
    labels = pod["metadata"]["labels"]
    cluster_ip = one(objects, "Service", "normsvc")
    headless = one(objects, "Service", "normsvc-headless")
    assert cluster_ip["spec"]["type"] == "ClusterIP"
    assert {p["name"] for p in cluster_ip["spec"]["ports"]} == {"grpc", "metrics"}
    assert headless["spec"]["clusterIP"] == "None"
    assert [p["name"] for p in headless["spec"]["ports"]] == ["grpc"]
    container_ports = {p["name"] for p in container["ports"]}
    for service in (cluster_ip, headless):
        assert selects(service["spec"]["selector"], labels), service["metadata"]["name"]
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports


def test_scraping(overlay):
    """The ServiceMonitor scrapes the metrics port through the ClusterIP
    Service only; the annotations name the same port and path."""
    _, objects = overlay
    pod, container = container_of(objects)
    monitor = one(objects, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    selected = [s for s in by_kind(objects, "Service") if selects(selector, s["metadata"]["labels"])]
    scraped = [s["metadata"]["name"] for s in selected
               if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    assert scraped == ["normsvc"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert int(annotations["prometheus.io/port"]) == port_number(container, "metrics")
    assert annotations["prometheus.io/path"] == monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def adapter_rules(monitoring):
    config = one(monitoring, "ConfigMap", "adapter-config")
    return yaml.safe_load(config["data"]["config.yaml"])["rules"]


def test_autoscaler_metrics_are_served_by_the_adapter(overlay, monitoring):
    _, objects = overlay
    hpa = one(objects, "HorizontalPodAutoscaler")
    deployment = one(objects, "Deployment")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": deployment["metadata"]["name"]}
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    served = {}
    for rule in adapter_rules(monitoring):
        assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
        assert rule["resources"]["overrides"]["namespace"] == {"resource": "namespace"}
        series = re.match(r"^([a-z_:]+)\{", rule["seriesQuery"]).group(1)
        assert series in server_metrics.series_names(), series
        served[rule["name"]["as"]] = rule
    names = []
    for metric in hpa["spec"]["metrics"]:
        if metric["type"] == "Resource":
            assert metric["resource"]["name"] == "cpu"
            assert 0 < metric["resource"]["target"]["averageUtilization"] <= 90
            continue
        assert metric["type"] == "Pods"
        names.append(metric["pods"]["metric"]["name"])
        assert metric["pods"]["target"]["type"] == "AverageValue"
    assert sorted(names) == sorted(served)
    # CPU utilization is relative to the request: there must be one.
    _, container = container_of(objects)
    assert container["resources"]["requests"]["cpu"]


def test_disruption_budget(overlay):
    _, objects = overlay
    pod, _ = container_of(objects)
    pdb = one(objects, "PodDisruptionBudget")
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


def test_network_policy(overlay):
    _, objects = overlay
    pod, container = container_of(objects)
    policy = one(objects, "NetworkPolicy")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], pod["metadata"]["labels"])
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    rules = {}
    for rule in policy["spec"]["ingress"]:
        (port,) = rule["ports"]
        assert port["port"] in {p["name"] for p in container["ports"]}
        rules[port["port"]] = rule["from"]
    assert rules["grpc"] == [{"namespaceSelector": {},
                              "podSelector": {"matchLabels": {"normsvc/client": "true"}}}]
    assert rules["metrics"] == [{"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "monitoring"}}}]


def quantity(text):
    """A Kubernetes quantity as a float (the suffixes the HPA targets use)."""
    text = str(text)
    for suffix, scale in (("n", 1e-9), ("u", 1e-6), ("m", 1e-3), ("k", 1e3)):
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * scale
    return float(text)


def test_autoscaling_targets_follow_the_batching_settings(overlay):
    """deploy/README.md: pending rows per pod = one full batch per GPU; the
    queue-wait target lies above the batching delay plus one GPU batch."""
    name, objects = overlay
    settings = config_of(objects)
    _, container = container_of(objects)
    gpus = int(container["resources"]["limits"].get("nvidia.com/gpu", 1))
    targets = {m["pods"]["metric"]["name"]: quantity(m["pods"]["target"]["averageValue"])
               for m in one(objects, "HorizontalPodAutoscaler")["spec"]["metrics"] if m["type"] == "Pods"}
    assert targets["normsvc_pending_rows_avg1m"] == int(settings["NORMSVC_MAX_BATCH_ROWS"]) * gpus
    delay_s = int(settings["NORMSVC_MAX_QUEUE_DELAY_US"]) * 1e-6
    # H200: a full batch crosses PCIe twice at about 55 GB/s.
    batch_s = 2 * int(settings["NORMSVC_MAX_BATCH_BYTES"]) / 55e9
    wait = targets["normsvc_queue_wait_seconds_p99"]
    assert delay_s + batch_s < wait <= delay_s + 4 * int(settings["NORMSVC_BATCHES_IN_FLIGHT"]) * batch_s \
        or name == "cpu", (wait, delay_s, batch_s)
    assert wait > delay_s


@pytest.mark.skipif("NORMSVC_BINARY" not in __import__("os").environ,
                    reason="needs NORMSVC_BINARY (the built server) to read its --help")
def test_every_setting_is_a_flag_of_the_built_server(overlay):
    """The server's own --help names the environment variable of each flag;
    every NORMSVC_* the manifests set must be among them."""
    import os
    import subprocess
    help_text = subprocess.run([os.environ["NORMSVC_BINARY"], "--help"], capture_output=True,
                               text=True, timeout=30).stdout
    documented = set(re.findall(r"\benv (NORMSVC_[A-Z0-9_]+)", help_text))
    assert len(documented) >= len(SERVER_FLAGS) - 2, help_text
    assert set(config_of(overlay[1])) <= documented
