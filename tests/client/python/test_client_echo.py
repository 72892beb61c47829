"""The Python client against the echo server (Normalize returns the input):
tensor encoding in every dtype, streaming order, errors, and .npy files
exchanged with normctl."""
import os
import subprocess

import numpy as np
import pytest

import normsvc_client
from normsvc_client import tensors


def bf16_round(x):
    """Independent bf16 rounding in float64 arithmetic: nearest, ties to even."""
    x = np.asarray(x, dtype=np.float64)
    exponent = np.floor(np.log2(np.abs(x)))
    step = 2.0 ** (exponent - 7)  # 8 significant bits
    return np.round(x / step) * step  # np.round rounds half to even


@pytest.fixture()
def client(echo_server):
    with normsvc_client.Client(echo_server.target, timeout=10) as c:
        yield c


@pytest.fixture()
def rng():
    return np.random.default_rng()


def test_normalize_round_trips_fp32_and_fp16(client, rng):
    x = rng.normal(0.5, 2.0, size=(4, 3, 16)).astype(np.float32)
    y = client.normalize(x, op="layernorm")
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_array_equal(y, x)
    h = x.astype(np.float16)
    yh = client.normalize(h, op="rmsnorm")
    assert yh.dtype == np.float16
    np.testing.assert_array_equal(yh, h)


def test_bf16_rounding_matches_independent_rounding(client, rng):
    x = rng.normal(0.0, 3.0, size=(8, 64)).astype(np.float32)
    y = client.normalize(x, dtype="bf16")
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.astype(np.float64), bf16_round(x))
    bits = tensors.float_to_bf16_bits(x)
    np.testing.assert_array_equal(tensors.bf16_bits_to_float(bits), y)


def test_stream_returns_results_in_input_order(client, rng):
    inputs = [rng.normal(size=(int(rng.integers(1, 5)), 32)).astype(np.float32) for _ in range(40)]
    outputs = list(client.normalize_stream(inputs, max_in_flight=7))
    assert len(outputs) == len(inputs)
    for x, y in zip(inputs, outputs):
        np.testing.assert_array_equal(x, y)
    unordered = dict(client.normalize_stream(inputs, ordered=False))
    assert sorted(unordered) == list(range(len(inputs)))


def test_info_health_and_errors(client):
    assert client.server_info()["backend"] == "echo"
    assert client.health() == "SERVING"
    with pytest.raises(normsvc_client.NormsvcError) as error:
        client.list_parameters()
    assert error.value.code.name == "UNIMPLEMENTED"
    with pytest.raises(ValueError):
        client.normalize(np.ones((2, 2), np.float32), op="groupnorm")


def test_module_level_helpers_use_the_target(echo_server, rng):
    x = rng.normal(size=(2, 8)).astype(np.float32)
    np.testing.assert_array_equal(normsvc_client.normalize(x, target=echo_server.target), x)


def test_normctl_reads_and_writes_numpy_files(echo_server, tmp_path, rng):
    """.npy files written by NumPy go through normctl and load back in NumPy."""
    normctl = os.environ["NORMCTL"]
    x = rng.normal(1.0, 2.0, size=(3, 5, 7)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    cases = [("fp32", x.astype(np.float64)),
             ("fp16", x.astype(np.float16).astype(np.float64)),
             ("bf16", bf16_round(x))]
    for dtype, want in cases:
        out = tmp_path / f"y_{dtype}.npy"
        run = subprocess.run([normctl, "normalize", "--op=layernorm", f"--in={tmp_path / 'x.npy'}",
                              f"--out={out}", f"--dtype={dtype}", f"--target={echo_server.target}"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        y = np.load(out)
        assert y.shape == x.shape
        if dtype == "bf16":  # documented convention: raw bf16 bits as uint16
            assert y.dtype == np.uint16
            y = (y.astype(np.uint32) << 16).view(np.float32)
        np.testing.assert_array_equal(y.astype(np.float64), want)
    # bf16 input as ml_dtypes saves it ('|V2'), and float64 input.
    bits = tensors.float_to_bf16_bits(x)
    np.save(tmp_path / "xv.npy", bits.view(np.dtype("V2")))
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    for name, want_bits in [("xv.npy", bits), ("x64.npy", None)]:
        out = tmp_path / ("out_" + name)
        run = subprocess.run([normctl, "normalize", "--op=rmsnorm", f"--in={tmp_path / name}",
                              f"--out={out}", f"--target={echo_server.target}"],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        y = np.load(out)
        if want_bits is not None:
            np.testing.assert_array_equal(y, want_bits)
        else:
            assert y.dtype == np.float32
            np.testing.assert_array_equal(y, x)


def test_numpy_dtypes_name_the_wire_dtype(client, rng):
    x = rng.normal(0.0, 3.0, size=(3, 40)).astype(np.float64)
    yh = client.normalize(x, dtype=np.float16)
    assert yh.dtype == np.float16
    np.testing.assert_array_equal(yh, x.astype(np.float16))
    y = client.normalize(x, dtype=np.dtype("float32"), out_dtype="fp32")
    np.testing.assert_array_equal(y, x.astype(np.float32))
    with pytest.raises(ValueError):
        client.normalize(x, dtype=np.int8)


def test_big_endian_float16_is_sent_as_fp16(client, rng):
    x = rng.normal(0.0, 3.0, size=(2, 24)).astype(">f2")
    request = client.normalize_request(x)
    assert request.input.dtype == tensors.pb.FP16
    assert len(request.input.data) == x.size * 2
    y = client.normalize(x)  # the echo returns the input's bytes
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, x.astype(np.float16))
