"""The Python client against a CPU-backend normsvc: every helper's results
against NumPy float64 computations on fresh random data."""
import threading
import time

import numpy as np
import pytest

import normsvc_client
from conftest import bounded


@pytest.fixture()
def client(normsvc_server):
    with normsvc_client.Client(normsvc_server.target, timeout=20) as c:
        yield c


@pytest.fixture()
def rng():
    return np.random.default_rng()


def layer_norm64(v, gamma, beta, eps):
    v = v.astype(np.float64)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    return (v - mean) * rstd * gamma + beta, mean[..., 0], rstd[..., 0]


def rms_norm64(v, gamma, eps):
    v = v.astype(np.float64)
    rstd = 1.0 / np.sqrt((v * v).mean(axis=-1, keepdims=True) + eps)
    return v * rstd * gamma, rstd[..., 0]


def bf16(x):
    return normsvc_client.bf16_bits_to_float(normsvc_client.float_to_bf16_bits(x))


def test_layernorm_fp32_with_residual_and_statistics(client, rng):
    x = rng.normal(0.4, 1.8, size=(3, 4, 300)).astype(np.float32)
    r = rng.normal(0.0, 0.5, size=x.shape).astype(np.float32)
    g = rng.normal(1.0, 0.3, size=300).astype(np.float32)
    b = rng.normal(0.0, 0.3, size=300).astype(np.float32)
    result = client.normalize(x, op="layernorm", gamma=g, beta=b, residual=r, eps=1e-4,
                              return_residual_sum=True, return_statistics=True)
    v = (x + r).astype(np.float32)  # the sum is rounded to the input dtype
    want, mean, rstd = layer_norm64(v, g.astype(np.float64), b.astype(np.float64), 1e-4)
    np.testing.assert_array_equal(result.residual_sum, v)
    np.testing.assert_allclose(result.output, want, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(result.mean, mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(result.rstd, rstd, rtol=1e-6)
    assert result.output.shape == x.shape and result.mean.shape == (3, 4)


@pytest.mark.parametrize("dtype,rtol", [("fp16", 2e-3), ("bf16", 1.6e-2)])
def test_rmsnorm_16_bit(client, rng, dtype, rtol):
    x = rng.normal(0.0, 2.0, size=(17, 256)).astype(np.float32)
    g = rng.normal(1.0, 0.3, size=256).astype(np.float32)
    if dtype == "fp16":
        sent, y = x.astype(np.float16), client.normalize(x.astype(np.float16), op="rmsnorm", gamma=g)
        assert y.dtype == np.float16
    else:
        sent, y = bf16(x), client.normalize(x, op="rmsnorm", gamma=g, dtype="bf16")
    want, _ = rms_norm64(sent, g.astype(np.float64), 1e-5)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=rtol, atol=rtol)
    y32 = client.normalize(x.astype(np.float16), op="rmsnorm", gamma=g, out_dtype="fp32")
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, rms_norm64(x.astype(np.float16), g.astype(np.float64), 1e-5)[0],
                               rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_backward(client, rng, op):
    x = rng.normal(0.3, 1.5, size=(6, 128)).astype(np.float32)
    dy = rng.normal(0.0, 1.0, size=x.shape).astype(np.float32)
    g = rng.normal(1.0, 0.3, size=128).astype(np.float32)
    result = client.normalize_backward(x, dy, op=op, gamma=g)
    xd, dyd, gd = x.astype(np.float64), dy.astype(np.float64), g.astype(np.float64)
    mean = xd.mean(-1, keepdims=True) if op == "layernorm" else 0.0
    rstd = 1.0 / np.sqrt(((xd - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (xd - mean) * rstd
    gy = dyd * gd
    dx = gy - (gy * xhat).mean(-1, keepdims=True) * xhat
    if op == "layernorm":
        dx -= gy.mean(-1, keepdims=True)
    dx *= rstd
    np.testing.assert_allclose(result.grad_input, dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(result.grad_gamma, (dyd * xhat).sum(0), rtol=1e-5, atol=1e-5)
    if op == "layernorm":
        np.testing.assert_allclose(result.grad_beta, dyd.sum(0), rtol=1e-5, atol=1e-5)


def test_statistics_of_a_vector_are_scalars_and_feed_the_backward(client, rng):
    x = rng.normal(0.7, 2.0, size=200).astype(np.float32)
    dy = rng.normal(0.0, 1.0, size=x.shape).astype(np.float32)
    result = client.normalize(x, return_statistics=True)
    _, mean, rstd = layer_norm64(x, 1.0, 0.0, 1e-5)
    assert result.mean.shape == () and result.rstd.shape == ()
    np.testing.assert_allclose(result.rstd, rstd, rtol=1e-6)
    xhat = (x.astype(np.float64) - mean) * rstd
    dyd = dy.astype(np.float64)
    want = (dyd - dyd.mean() - (dyd * xhat).mean() * xhat) * rstd
    for mean_in, rstd_in in ((result.mean, result.rstd), (float(result.mean), [result.rstd])):
        grads = client.normalize_backward(x, dy, mean=mean_in, rstd=rstd_in)
        np.testing.assert_allclose(grads.grad_input, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="rstd has 2 values"):
        client.normalize_backward(x, dy, mean=result.mean, rstd=[1.0, 2.0])


def test_registered_parameters_and_stream(client, rng):
    name = f"pytest-{rng.integers(1 << 30)}"
    g = rng.normal(1.0, 0.3, size=64).astype(np.float32)
    b = rng.normal(0.0, 0.3, size=64).astype(np.float32)
    info = client.register_parameters(name, g, b)
    assert info["hidden_size"] == 64 and info["has_beta"]
    assert name in [s["name"] for s in client.list_parameters()]
    inputs = [rng.normal(size=(int(rng.integers(1, 6)), 64)).astype(np.float32) for _ in range(25)]
    outputs = list(client.normalize_stream(inputs, op="layernorm", params=name, max_in_flight=8))
    assert len(outputs) == len(inputs)
    for x, y in zip(inputs, outputs):
        want, _, _ = layer_norm64(x, g.astype(np.float64), b.astype(np.float64), 1e-5)
        np.testing.assert_allclose(y, want, rtol=2e-6, atol=2e-6)
    client.delete_parameters(name)
    with pytest.raises(normsvc_client.NormsvcError) as error:
        client.normalize(inputs[0], params=name)
    assert error.value.code.name == "NOT_FOUND"


def test_server_info_and_validation_errors(client, rng):
    info = client.server_info()
    assert info["backend"] == "cpu"
    assert int(info["limits"]["max_hidden_size"]) > 0
    assert client.health() == "SERVING"
    with pytest.raises(normsvc_client.NormsvcError) as error:
        client.normalize(rng.normal(size=(2, 8)).astype(np.float32), gamma=np.ones(9, np.float32))
    assert error.value.code.name == "INVALID_ARGUMENT"


def test_stream_refuses_bad_arguments_before_it_starts(client, rng):
    """What normalize() would refuse raises from the call itself, promptly."""
    inputs = [rng.normal(size=(2, 16)).astype(np.float32) for _ in range(3)]
    for kwargs, error in [({"op": "foo"}, ValueError), ({"dtype": "int8"}, ValueError),
                          ({"out_dtype": "fp64"}, ValueError), ({"max_in_flight": 0}, ValueError),
                          ({"max_in_flight": 2.5}, TypeError), ({"gama": inputs[0][0]}, TypeError),
                          ({"params": "p", "gamma": inputs[0][0]}, ValueError)]:
        with pytest.raises(error):
            bounded(lambda: client.normalize_stream(inputs, **kwargs), 5)


def test_stream_timeout_is_the_deadline_of_the_stream(client, rng):
    inputs = [rng.normal(0.5, 2.0, size=(3, 48)).astype(np.float32) for _ in range(6)]
    outputs = bounded(lambda: list(client.normalize_stream(inputs, op="rmsnorm", timeout=5)), 20)
    assert len(outputs) == len(inputs)
    for x, y in zip(inputs, outputs):
        np.testing.assert_allclose(y, rms_norm64(x, 1.0, 1e-5)[0], rtol=2e-6, atol=2e-6)

    release = threading.Event()

    def stalled():  # one input, then nothing until the test is over
        yield inputs[0]
        release.wait(20)

    start = time.monotonic()
    try:
        with pytest.raises(normsvc_client.NormsvcError) as error:
            bounded(lambda: list(client.normalize_stream(stalled(), timeout=0.5)), 10)
    finally:
        release.set()
    assert error.value.code.name == "DEADLINE_EXCEEDED"
    assert time.monotonic() - start >= 0.45


def test_stream_raises_what_failed_while_reading_the_inputs(client, rng):
    good = rng.normal(size=(2, 32)).astype(np.float32)
    with pytest.raises(ValueError):  # not a number: refused while encoding the second input
        bounded(lambda: list(client.normalize_stream([good, np.array([["x", "y"]]), good])), 10)

    def failing():
        yield good
        yield good
        raise RuntimeError("input source failed")

    with pytest.raises(RuntimeError, match="input source failed"):
        bounded(lambda: list(client.normalize_stream(failing(), max_in_flight=1)), 10)


def test_stream_per_request_error_raises(client, rng):
    g = rng.normal(1.0, 0.3, size=32).astype(np.float32)
    inputs = [rng.normal(size=(2, 32)).astype(np.float32),
              rng.normal(size=(2, 24)).astype(np.float32)]  # hidden size 24: gamma does not fit
    for ordered in (True, False):
        with pytest.raises(normsvc_client.NormsvcError) as error:
            bounded(lambda: list(client.normalize_stream(inputs, gamma=g, ordered=ordered)), 10)
        assert error.value.code.name == "INVALID_ARGUMENT"
        assert error.value.details.startswith("request 1:")
