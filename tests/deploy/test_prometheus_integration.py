"""A real Prometheus scrapes a real normsvc (CPU backend), both on loopback.

Prometheus runs with the shipped deploy/prometheus/prometheus.yml (scrape
and evaluation intervals cut to 1 s, the target file pointed at the test
server) and the shipped rule files. The test sends known traffic over gRPC
with stubs generated from proto/ at test time, then reads the series back
through Prometheus's HTTP query API: request counts and rows must match
exactly, histograms must hold exactly the observations sent; the recording
and alert rules must evaluate without error, the prometheus-adapter queries
must give the HPA a number per pod, and every dashboard query must parse.

Needs NORMSVC_BINARY (the server) and prometheus on PATH.
"""
import concurrent.futures
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
import yaml

from conftest import DEPLOY, REPO, require_tool
import server_metrics

NAMESPACE = "deploytest"
POD = "normsvc-test"
STARTUP_TIMEOUT_S = 60
SCRAPE_TIMEOUT_S = 30


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s, what, interval_s=0.2):
    """Polls predicate() until it returns a truthy value; bounded in time."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last_error = e
        time.sleep(interval_s)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what} (last error: {last_error})")


def generate_stubs(out_dir):
    from grpc_tools import protoc
    proto_root = REPO / "proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_root}", f"--python_out={out_dir}",
                      f"--grpc_python_out={out_dir}", str(proto_root / "normsvc/v1/normalizer.proto")])
    assert rc == 0, "protoc failed on proto/normsvc/v1/normalizer.proto"
    sys.path.insert(0, str(out_dir))
    from normsvc.v1 import normalizer_pb2, normalizer_pb2_grpc
    return normalizer_pb2, normalizer_pb2_grpc


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]

    def value(self, expr, at=None):
        """The value of an expression that selects exactly one series."""
        result = self.query(expr, at)
        assert len(result) == 1, f"{expr}: expected one series, got {result}"
        return float(result[0]["value"][1])

    def total(self, expr, at=None):
        """Sum over all series the expression selects; 0 when none."""
        return sum(float(r["value"][1]) for r in self.query(expr, at))

    def rules(self):
        with urllib.request.urlopen(f"{self.base}/api/v1/rules", timeout=10) as response:
            return json.load(response)["data"]["groups"]


def stop(process, timeout_s):
    """SIGTERM, then SIGKILL after timeout_s; returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    return process.returncode


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    binary = os.environ.get("NORMSVC_BINARY")
    if not binary:
        pytest.fail("NORMSVC_BINARY is not set (tests/deploy/CMakeLists.txt passes the built server)")
    prometheus_bin = require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus_integration")
    pb2, pb2_grpc = generate_stubs(tmp / "stubs")
    grpc_port, metrics_port, prometheus_port = free_port(), free_port(), free_port()
    assert len({grpc_port, metrics_port, prometheus_port}) == 3

    # The server, configured by flags only (no NORMSVC_* from the caller).
    env = {k: v for k, v in os.environ.items() if not k.startswith("NORMSVC_")}
    server_log = open(tmp / "normsvc.log", "w")
    server = subprocess.Popen([binary, f"--grpc_address=127.0.0.1:{grpc_port}",
                               f"--metrics_address=127.0.0.1:{metrics_port}", "--backend=cpu"],
                              stdout=server_log, stderr=subprocess.STDOUT, env=env)

    # Prometheus with the shipped configuration, sped up, on this server.
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    config["rule_files"] = [str(DEPLOY / "prometheus" / f) for f in config["rule_files"]]
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "normsvc"]
    job["file_sd_configs"] = [{"files": [str(tmp / "targets.yml")], "refresh_interval": "1s"}]
    (tmp / "targets.yml").write_text(yaml.safe_dump([{
        "targets": [f"127.0.0.1:{metrics_port}"], "labels": {"namespace": NAMESPACE, "pod": POD}}]))
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    prometheus_log = open(tmp / "prometheus.log", "w")
    prometheus = subprocess.Popen(
        [prometheus_bin, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{prometheus_port}",
         "--log.level=warn"],
        stdout=prometheus_log, stderr=subprocess.STDOUT)

    import grpc
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=STARTUP_TIMEOUT_S)
        except grpc.FutureTimeoutError:
            pytest.fail(f"normsvc did not accept connections within {STARTUP_TIMEOUT_S} s "
                        f"(exit code {server.poll()}): {(tmp / 'normsvc.log').read_text()[-4000:]}")
        prom = Prometheus(prometheus_port)

        def ready():
            with urllib.request.urlopen(f"{prom.base}/-/ready", timeout=2) as r:
                return r.status == 200
        wait_until(ready, STARTUP_TIMEOUT_S, "Prometheus /-/ready")
        yield {"pb2": pb2, "stub": pb2_grpc.NormalizerStub(channel), "prom": prom,
               "server": server, "tmp": tmp}
    finally:
        channel.close()
        server_code = stop(server, 45)
        stop(prometheus, 15)
        server_log.close()
        prometheus_log.close()
        for log in ("normsvc.log", "prometheus.log"):
            text = (tmp / log).read_text()
            if text:
                print(f"---- {log} (last 3000 characters)\n{text[-3000:]}")
        print(f"normsvc exit code after SIGTERM: {server_code}")


def selector(**labels):
    labels = dict(namespace=NAMESPACE, pod=POD, **labels)
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def tensor(pb2, array, dtype):
    return pb2.Tensor(dtype=dtype, shape=list(array.shape), data=array.tobytes())


def layer_norm_reference(x, eps):
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def rms_norm_reference(x, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)


def random_rows(rng, max_rows=48):
    rows, hidden = int(rng.integers(1, max_rows + 1)), int(rng.integers(8, 513))
    return rng.normal(1.0, 3.0, size=(rows, hidden))


def scrape_after(prom, t, what):
    """Waits for a scrape of the server that began after wall time t."""
    def scraped():
        result = prom.query(f'timestamp(up{{job="normsvc",namespace="{NAMESPACE}"}})')
        return result and float(result[0]["value"][1]) > t
    wait_until(scraped, SCRAPE_TIMEOUT_S, what)


def test_known_traffic_reads_back_exactly(stack):
    pb2, stub, prom = stack["pb2"], stack["stub"], stack["prom"]
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    rng = np.random.default_rng(seed)

    # ---- Before any traffic: a fresh server, scraped; the families exist.
    wait_until(lambda: prom.query(f"up{selector()} == 1"), SCRAPE_TIMEOUT_S, "the first scrape")
    scraped_names = {r["metric"]["__name__"] for r in prom.query(f'{{job="normsvc",namespace="{NAMESPACE}"}}')}
    cpu_families = (server_metrics.COUNTERS | server_metrics.GAUGES | server_metrics.HISTOGRAMS) \
        - server_metrics.GPU_ONLY
    for family in cpu_families:
        name = family + "_count" if family in server_metrics.HISTOGRAMS else family
        assert name in scraped_names, f"{name} not exported (server interface)"
    assert prom.value(f'normsvc_build_info{selector(backend="cpu")}') == 1
    assert prom.total(f'normsvc_requests_total{selector(method="Normalize")}') == 0
    # The adapter's queue-wait query gives an idle pod 0, not NaN.
    adapter = yaml.safe_load((DEPLOY / "k8s/monitoring/prometheus-adapter-rules.yaml").read_text())["rules"]

    def adapter_query(rule):
        return (rule["metricsQuery"].replace("<<.GroupBy>>", "pod")
                .replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod="{POD}"'))
    queue_wait_rule = next(r for r in adapter if r["name"]["as"] == "normsvc_queue_wait_seconds_p99")
    idle = wait_until(lambda: prom.query(adapter_query(queue_wait_rule)), SCRAPE_TIMEOUT_S,
                      "the adapter's queue-wait query on an idle server")
    assert [float(r["value"][1]) for r in idle] == [0.0]
    info_before = prom.total(f'normsvc_requests_total{selector(method="GetServerInfo")}')

    # ---- Known traffic.
    eps = 1e-5
    ln_inputs = [random_rows(rng).astype(np.float32) for _ in range(int(rng.integers(12, 25)))]
    rms_inputs = [random_rows(rng).astype(np.float16) for _ in range(int(rng.integers(5, 12)))]
    n_invalid = int(rng.integers(2, 6))
    n_info = int(rng.integers(1, 5))

    # Layer norm, fp32, unary, in parallel so that requests share batches.
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(stub.Normalize, pb2.NormalizeRequest(
            request_id=i, op=pb2.LAYER_NORM, input=tensor(pb2, x, pb2.FP32), epsilon=eps), timeout=60)
            for i, x in enumerate(ln_inputs)]
        for x, future in zip(ln_inputs, futures):
            out = future.result().output
            assert list(out.shape) == list(x.shape)
            y = np.frombuffer(out.data, dtype=np.float32).reshape(x.shape)
            np.testing.assert_allclose(y, layer_norm_reference(x, eps), rtol=1e-4, atol=1e-4)

    # RMS norm, fp16, over one stream.
    requests = [pb2.NormalizeRequest(request_id=1000 + i, op=pb2.RMS_NORM,
                                     input=tensor(pb2, x, pb2.FP16), epsilon=eps)
                for i, x in enumerate(rms_inputs)]
    replies = list(stub.NormalizeStream(iter(requests), timeout=60))
    assert sorted(r.request_id for r in replies) == [1000 + i for i in range(len(rms_inputs))]
    for reply in replies:
        assert reply.WhichOneof("result") == "response", reply.error
        x = rms_inputs[reply.request_id - 1000]
        y = np.frombuffer(reply.response.output.data, dtype=np.float16).reshape(x.shape)
        np.testing.assert_allclose(y.astype(np.float64), rms_norm_reference(x, eps), rtol=2e-2, atol=2e-2)

    # Invalid requests (epsilon must be > 0): rejected at the edge, never queued.
    import grpc
    for _ in range(n_invalid):
        with pytest.raises(grpc.RpcError) as error:
            stub.Normalize(pb2.NormalizeRequest(op=pb2.LAYER_NORM, epsilon=-1.0,
                                                input=tensor(pb2, random_rows(rng, 4).astype(np.float32),
                                                             pb2.FP32)), timeout=30)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    for _ in range(n_info):
        assert stub.GetServerInfo(pb2.GetServerInfoRequest(), timeout=30).backend == "cpu"
    traffic_end = time.time()

    # ---- Read back through Prometheus, from a scrape taken after the traffic.
    scrape_after(prom, traffic_end + 0.5, "a scrape after the traffic")
    at = time.time()
    ln_rows = sum(x.shape[0] for x in ln_inputs)
    rms_rows = sum(x.shape[0] for x in rms_inputs)
    queued = len(ln_inputs) + len(rms_inputs)

    def v(expr):
        return prom.value(expr, at)

    def t(expr):
        return prom.total(expr, at)

    assert v(f'normsvc_requests_total{selector(method="Normalize", op="layer_norm", dtype="fp32", code="OK")}') \
        == len(ln_inputs)
    assert v(f'normsvc_requests_total{selector(method="NormalizeStream", op="rms_norm", dtype="fp16", code="OK")}') \
        == len(rms_inputs)
    assert t(f'normsvc_requests_total{selector(method="Normalize", code="INVALID_ARGUMENT")}') == n_invalid
    assert t(f'normsvc_requests_total{selector(method="Normalize")}') == len(ln_inputs) + n_invalid
    assert t(f'normsvc_requests_total{selector(method="GetServerInfo", code="OK")}') - info_before == n_info
    assert t(f'normsvc_requests_total{selector(method="NormalizeBackward")}') == 0
    assert v(f'normsvc_request_rows_total{selector(method="Normalize", op="layer_norm", dtype="fp32")}') == ln_rows
    assert v(f'normsvc_request_rows_total{selector(method="NormalizeStream", op="rms_norm", dtype="fp16")}') \
        == rms_rows

    # End-to-end latency: one observation per request, errors included.
    check_histogram(prom, at, "normsvc_request_duration_seconds", selector(method="Normalize"),
                    len(ln_inputs) + n_invalid)
    check_histogram(prom, at, "normsvc_request_duration_seconds", selector(method="NormalizeStream"),
                    len(rms_inputs))
    # Queue wait: one observation per queued (valid) request.
    check_histogram(prom, at, "normsvc_queue_wait_seconds", selector(device="cpu"), queued)
    # Batches: every queued request and row launched exactly once.
    launches = v(f'normsvc_batch_requests_count{selector(device="cpu")}')
    assert 1 <= launches <= queued
    assert v(f'normsvc_batch_rows_count{selector(device="cpu")}') == launches
    assert v(f'normsvc_batch_requests_sum{selector(device="cpu")}') == queued
    assert v(f'normsvc_batch_rows_sum{selector(device="cpu")}') == ln_rows + rms_rows
    check_histogram(prom, at, "normsvc_batch_rows", selector(device="cpu"), launches)
    # Nothing left queued or in flight, nothing rejected.
    assert v(f'normsvc_pending_requests{selector(device="cpu")}') == 0
    assert v(f'normsvc_pending_rows{selector(device="cpu")}') == 0
    assert v(f'normsvc_batches_in_flight{selector(device="cpu")}') == 0
    assert t(f'normsvc_rejected_requests_total{selector()}') == 0

    # ---- The rules: recordings appear, and every rule evaluates cleanly.
    def recorded():
        return prom.query(f'namespace_method_code:normsvc_requests:rate1m'
                          f'{{namespace="{NAMESPACE}",method="Normalize",code="OK"}} > 0')
    wait_until(recorded, SCRAPE_TIMEOUT_S, "the recording rules")
    groups = prom.rules()
    shipped = sum(len(g["rules"]) for f in (DEPLOY / "prometheus/rules").glob("*.yml")
                  for g in yaml.safe_load(f.read_text())["groups"])
    loaded = [r for g in groups for r in g["rules"]]
    assert len(loaded) == shipped
    for rule in loaded:
        assert rule["health"] in ("ok", "unknown") and not rule.get("lastError"), rule
    firing = [r["name"] for r in loaded if r.get("type") == "alerting" and r["state"] != "inactive"]
    if os.environ.get("NORMSVC_SANITIZER_BUILD"):
        # The sanitizer presets run the server several times slower: only the
        # latency alerts may start there.
        firing = [n for n in firing if n not in ("NormsvcQueueWaitHigh", "NormsvcHighRequestLatencyP99")]
    assert not firing, f"alerts on a healthy server: {firing}"

    # ---- The HPA's metrics, as prometheus-adapter asks for them.
    for rule in adapter:
        result = prom.query(adapter_query(rule))
        assert [r["metric"].get("pod") for r in result] == [POD], (rule["name"]["as"], result)
        value = float(result[0]["value"][1])
        assert math.isfinite(value) and value >= 0, (rule["name"]["as"], value)
    wait = float(prom.query(adapter_query(queue_wait_rule))[0]["value"][1])
    assert 0 < wait <= 10, "p99 queue wait after traffic: a time within the buckets"

    # ---- Every dashboard query parses and runs; the core ones have data.
    dashboard = json.loads((DEPLOY / "grafana/normsvc-dashboard.json").read_text())
    with_data = 0
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = (target["expr"].replace("$namespace", NAMESPACE).replace("$pod", ".*")
                    .replace("$__rate_interval", "1m"))
            if prom.query(expr):
                with_data += 1
    assert with_data >= 15, f"only {with_data} dashboard queries returned data"


def check_histogram(prom, at, name, sel, observations):
    """Exactly `observations` observations, cumulative buckets ending in +Inf,
    bounds from about 10 microseconds (time histograms) upward."""
    buckets = {r["metric"]["le"]: float(r["value"][1]) for r in prom.query(f"{name}_bucket{sel}", at)}
    assert buckets, f"no buckets for {name}{sel}"
    bounds = sorted(buckets, key=float)
    assert bounds[-1] == "+Inf"
    counts = [buckets[b] for b in bounds]
    assert counts == sorted(counts), f"{name}{sel}: buckets not cumulative {counts}"
    assert counts[-1] == observations, f"{name}{sel}: +Inf bucket {counts[-1]} != {observations}"
    assert prom.value(f"{name}_count{sel}", at) == observations
    if name.endswith("_seconds"):
        finite = [float(b) for b in bounds[:-1]]
        assert math.isclose(finite[0], 1e-5, rel_tol=1e-6), finite[0]
        assert 5 <= finite[-1] <= 20, finite[-1]
        assert prom.value(f"{name}_sum{sel}", at) > 0


def test_server_exits_cleanly_on_sigterm(stack):
    """What terminationGracePeriodSeconds relies on: SIGTERM drains and exits 0."""
    server = stack["server"]
    assert server.poll() is None, "normsvc exited early"
    started = time.monotonic()
    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=40)
    except subprocess.TimeoutExpired:
        pytest.fail("normsvc did not exit within 40 s of SIGTERM (drain_timeout_s is 30)")
    assert code == 0
    assert time.monotonic() - started < 35
