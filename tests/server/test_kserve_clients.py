"""Real protocol clients from PyPI against a real normsvc (CPU backend) on
loopback: tritonclient.grpc calls every implemented RPC of
inference.GRPCInferenceService and checks ModelInfer against NumPy float64;
perf_analyzer (the one the pinned tritonclient wheel carries) runs a short
concurrency sweep, and the server's ModelStatistics and Prometheus counters
must show its requests.

A client that is not installed is a skip with the reason (a session of
skips only exits 77: conftest.py; ctest reports SKIPPED), never a pass.
Run: NORMSVC_BINARY=<build>/server/normsvc python -m pytest -q -rs this_file
"""
import csv
import importlib.util
import io
import os
import re
import socket
import subprocess
import sys
import time
import types
import urllib.request

import numpy as np
import pytest

BINARY = os.environ.get("NORMSVC_BINARY", "")
RNG = np.random.default_rng()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tritonclient_grpc():
    try:
        import tritonclient.grpc as grpcclient  # noqa: PLC0415
    except ImportError as error:
        pytest.skip(f"tritonclient[grpc] is not installed in this Python ({error}); "
                    "pip install 'tritonclient[grpc]'")
    return grpcclient


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not BINARY or not os.access(BINARY, os.X_OK):
        pytest.fail(f"NORMSVC_BINARY does not name the normsvc binary: {BINARY!r}")
    port, metrics_port = free_port(), free_port()
    log_path = tmp_path_factory.mktemp("kserve") / "normsvc.log"
    log = open(log_path, "w")
    process = subprocess.Popen([BINARY, f"--grpc_address=127.0.0.1:{port}",
                                f"--metrics_address=127.0.0.1:{metrics_port}", "--backend=cpu"],
                               stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"normsvc did not start; log:\n{log_path.read_text()}")
            time.sleep(0.1)
    yield types.SimpleNamespace(port=port, metrics_port=metrics_port, log_path=log_path)
    process.send_signal(subprocess.signal.SIGTERM)
    try:
        assert process.wait(timeout=30) == 0, log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


def reference(op, x, gamma=None, beta=None, eps=1e-5):
    x = x.astype(np.float64)
    if op == "layernorm":
        mean = x.mean(axis=-1, keepdims=True)
        y = (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + eps)
    else:
        y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    if gamma is not None:
        y = y * gamma.astype(np.float64)
    if beta is not None:
        y = y + beta.astype(np.float64)
    return y


def infer(client, grpcclient, model, tensors, eps=None):
    inputs = []
    for name, array in tensors.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    # A string: every tritonclient version sends it (older ones refuse floats).
    params = {"epsilon": str(eps)} if eps is not None else None
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                          request_id="r1", parameters=params)
    return result


def test_tritonclient_every_rpc(server):
    grpcclient = tritonclient_grpc()
    from tritonclient.utils import InferenceServerException  # noqa: PLC0415
    client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{server.port}")

    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("layernorm") and client.is_model_ready("rmsnorm", "1")
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.is_model_ready("softmax")
    meta = client.get_server_metadata()
    assert meta.name == "normsvc" and "statistics" in meta.extensions

    model_meta = client.get_model_metadata("layernorm")
    assert [i.name for i in model_meta.inputs] == ["INPUT", "GAMMA", "BETA"]
    assert list(model_meta.inputs[0].shape) == [-1, -1] and model_meta.outputs[0].name == "OUTPUT"
    assert [i.name for i in client.get_model_metadata("rmsnorm").inputs] == ["INPUT", "GAMMA"]
    config = client.get_model_config("layernorm").config
    assert config.name == "layernorm" and config.max_batch_size == 0
    assert [i.name for i in config.input] == ["INPUT", "GAMMA", "BETA"]
    assert config.input[1].optional and not config.input[0].optional

    # ModelInfer: fresh random data, against float64 within FP32 tolerance.
    rows, hidden = 7, 96
    x = (RNG.standard_normal((rows, hidden)) * 3 + 1.5).astype(np.float32)
    gamma = RNG.uniform(0.5, 1.5, hidden).astype(np.float32)
    beta = RNG.standard_normal(hidden).astype(np.float32)
    out = infer(client, grpcclient, "layernorm", {"INPUT": x, "GAMMA": gamma, "BETA": beta},
                eps=1e-3)
    assert out.get_response().id == "r1"
    y = out.as_numpy("OUTPUT")
    assert y.dtype == np.float32 and y.shape == (rows, hidden)
    np.testing.assert_allclose(y, reference("layernorm", x, gamma, beta, 1e-3),
                               rtol=1e-4, atol=1e-4)
    y = infer(client, grpcclient, "rmsnorm", {"INPUT": x}).as_numpy("OUTPUT")
    np.testing.assert_allclose(y, reference("rmsnorm", x), rtol=1e-4, atol=1e-4)

    with pytest.raises(InferenceServerException, match="GAMMA|hidden|shape"):
        infer(client, grpcclient, "layernorm",
              {"INPUT": x, "GAMMA": np.ones(hidden + 1, np.float32)})
    with pytest.raises(InferenceServerException, match="unknown input"):
        infer(client, grpcclient, "layernorm", {"INPUT": x, "SCALE": gamma})

    # ModelStreamInfer: replies in order, one error that leaves the stream open.
    results = []
    client.start_stream(callback=lambda result, error: results.append((result, error)))
    streamed = [(RNG.standard_normal((2, 64)) * 2).astype(np.float32) for _ in range(3)]
    for i, array in enumerate(streamed):
        tensor = grpcclient.InferInput("INPUT", list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        client.async_stream_infer("rmsnorm" if i != 1 else "nosuchmodel", [tensor],
                                  request_id=str(i))
    deadline = time.monotonic() + 20
    while len(results) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    client.stop_stream()
    assert len(results) == 3
    assert results[1][1] is not None and "unknown model" in str(results[1][1])
    for i in (0, 2):
        result, error = results[i]
        assert error is None, error
        assert result.get_response().id == str(i)
        np.testing.assert_allclose(result.as_numpy("OUTPUT"), reference("rmsnorm", streamed[i]),
                                   rtol=1e-4, atol=1e-4)

    # ModelStatistics: exact counts of what this test ran.
    stats = client.get_inference_statistics("layernorm").model_stats
    assert len(stats) == 1 and stats[0].name == "layernorm"
    # One success of 7 rows; the failing GAMMA request counts as a failure
    # (the unknown-input one too: the model exists).
    assert stats[0].inference_count == rows and stats[0].execution_count == 1
    assert stats[0].inference_stats.success.count == 1
    assert stats[0].inference_stats.fail.count == 2
    # Queue and compute: one count per successful request, each took time,
    # together no longer than the requests.
    infer_stats = stats[0].inference_stats
    parts = [infer_stats.queue, infer_stats.compute_input, infer_stats.compute_infer,
             infer_stats.compute_output]
    assert [p.count for p in parts] == [1, 1, 1, 1]
    assert all(p.ns > 0 for p in parts) and sum(p.ns for p in parts) <= infer_stats.success.ns
    # The one launch held only this request: its size is the request's rows.
    assert [(b.batch_size, b.compute_infer.count) for b in stats[0].batch_stats] == [(rows, 1)]
    assert stats[0].batch_stats[0].compute_infer.ns == infer_stats.compute_infer.ns
    rms = client.get_inference_statistics("rmsnorm").model_stats[0]
    assert rms.inference_count == rows + 2 * 2 and rms.execution_count == 3
    names = {s.name for s in client.get_inference_statistics("").model_stats}
    assert {"layernorm", "rmsnorm"} <= names
    client.close()


def perf_analyzer_command():
    """The perf_analyzer next to this Python (tritonclient's wheel puts it in
    the venv's bin) and the environment it starts in; skips with the exact
    reason when it is missing or cannot load its libraries."""
    binary = os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    if not os.access(binary, os.X_OK):
        pytest.skip(f"perf_analyzer is not installed next to {sys.executable} "
                    "(tests/requirements.txt pins tritonclient[grpc]==2.41.0, whose wheel carries it)")
    env = dict(os.environ)
    cudart = importlib.util.find_spec("nvidia.cuda_runtime")
    if cudart is not None:
        lib = os.path.join(list(cudart.submodule_search_locations)[0], "lib")
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (lib, env.get("LD_LIBRARY_PATH")) if p)
    probe = subprocess.run([binary, "--version"], capture_output=True, text=True, env=env,
                           timeout=60)
    if probe.returncode == 127 or "error while loading shared libraries" in probe.stderr:
        pytest.skip(f"perf_analyzer cannot start on this machine: {probe.stderr.strip()} "
                    "(deploy/packages-test.txt: libb64-0d; tests/requirements.txt: "
                    "nvidia-cuda-runtime-cu12)")
    return binary, env


def model_statistics(port, model):
    grpcclient = tritonclient_grpc()
    client = grpcclient.InferenceServerClient(url=f"127.0.0.1:{port}")
    try:
        return client.get_inference_statistics(model).model_stats[0]
    finally:
        client.close()


def metric(metrics_port, name, **labels):
    """Sum of the samples of `name` whose labels include `labels`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    total = 0.0
    for line in text.decode().splitlines():
        match = re.fullmatch(r"(\w+)\{(.*)\} (\S+)", line)
        if not match or match.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group(3))
    return total


def test_perf_analyzer(server):
    tritonclient_grpc()
    binary, env = perf_analyzer_command()
    hidden = 4096
    before = model_statistics(server.port, "layernorm")
    ok_before = metric(server.metrics_port, "normsvc_requests_total", method="ModelInfer",
                       op="layer_norm", dtype="fp32", code="OK")
    csv_path = server.log_path.parent / "perf_analyzer.csv"
    # gRPC, no shared memory (the default); concurrency 1 and 4; windows of
    # 1 s; any spread counts as stable (the machine's cores are shared).
    run = subprocess.run([binary, "-m", "layernorm", "-i", "grpc", "-u", f"127.0.0.1:{server.port}",
                          "--shape", f"INPUT:1,{hidden}", "--shape", f"GAMMA:{hidden}",
                          "--shape", f"BETA:{hidden}", "--concurrency-range", "1:4:3",
                          "--measurement-interval", "1000", "--stability-percentage", "1000",
                          "--max-trials", "5", "-f", str(csv_path)],
                         capture_output=True, text=True, env=env, timeout=150)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = list(csv.DictReader(io.StringIO(csv_path.read_text())))
    # perf_analyzer orders its rows by throughput, not by concurrency: on a
    # loaded 2-core machine concurrency 4 may well come first.
    assert sorted(row["Concurrency"] for row in rows) == ["1", "4"], csv_path.read_text()
    for row in rows:
        assert float(row["Inferences/Second"]) > 0, row
        assert float(row["p99 latency"]) >= float(row["p50 latency"]) > 0, row
        # perf_analyzer's server columns come from ModelStatistics.
        assert int(row["Server Queue"]) >= 0 and int(row["Server Compute Infer"]) > 0, row
    measured = [int(n) for n in re.findall(r"Request count: (\d+)", run.stdout)]
    assert len(measured) == 2 and min(measured) > 0, run.stdout

    after = model_statistics(server.port, "layernorm")
    ok_after = metric(server.metrics_port, "normsvc_requests_total", method="ModelInfer",
                      op="layer_norm", dtype="fp32", code="OK")
    served = after.inference_stats.success.count - before.inference_stats.success.count
    # Every request perf_analyzer sent succeeded (warm-up and measured
    # windows); the Prometheus counter saw exactly the same requests.
    assert after.inference_stats.fail.count == before.inference_stats.fail.count
    assert served >= sum(measured), (served, measured)
    assert ok_after - ok_before == served
    assert after.inference_count - before.inference_count == served  # one row each
    assert metric(server.metrics_port, "normsvc_request_rows_total", method="ModelInfer",
                  op="layer_norm", dtype="fp32") >= served
    stats = after.inference_stats
    parts = [stats.queue.ns, stats.compute_input.ns, stats.compute_infer.ns,
             stats.compute_output.ns]
    assert all(ns > 0 for ns in parts) and sum(parts) <= stats.success.ns, stats
    executions = after.execution_count - before.execution_count
    assert 0 < executions <= served
    assert sum(b.compute_infer.count for b in after.batch_stats) == after.execution_count
