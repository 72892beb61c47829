"""normalize_stream against an in-process stand-in server on loopback that
answers NormalizeStream wrongly (a result missing, one twice, an unknown
id): every stream must end in NormsvcError, never in fewer results. Also the
client-side dtype checks, which refuse before anything is sent."""
from concurrent import futures

import grpc
import numpy as np
import pytest

import normsvc_client
from conftest import bounded
from normsvc_client import tensors
from normsvc_client._stubs import pb, pb_grpc


class StandIn(pb_grpc.NormalizerServicer):
    """Answers each request with its input, scaled by 2, as `mode` says."""

    def __init__(self):
        self.mode = "complete"
        self.received = 0

    def NormalizeStream(self, request_iterator, context):
        requests = list(request_iterator)  # every request, up to the half-close
        self.received += len(requests)
        answers = [(r.request_id, r.input) for r in requests]
        if self.mode == "drop_last":
            answers = answers[:-1]
        elif self.mode == "twice":
            answers.insert(1, answers[0])
        elif self.mode == "unknown_id":
            answers[-1] = (answers[-1][0] + 100, answers[-1][1])
        for request_id, tensor in answers:
            x = normsvc_client.from_tensor(tensor)
            yield pb.NormalizeStreamResponse(
                request_id=request_id,
                response=pb.NormalizeResponse(request_id=request_id,
                                              output=normsvc_client.to_tensor(2 * x)))


@pytest.fixture(scope="module")
def stand_in():
    servicer = StandIn()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_NormalizerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with normsvc_client.Client(f"127.0.0.1:{port}", timeout=10) as client:
        yield servicer, client
    server.stop(0)


@pytest.fixture()
def inputs():
    rng = np.random.default_rng()
    return [rng.normal(0.3, 1.7, size=(int(rng.integers(1, 4)), 16)).astype(np.float32)
            for _ in range(9)]


def test_a_complete_stream_yields_every_result(stand_in, inputs):
    servicer, client = stand_in
    servicer.mode = "complete"
    outputs = bounded(lambda: list(client.normalize_stream(inputs, max_in_flight=20)))
    assert len(outputs) == len(inputs)
    for x, y in zip(inputs, outputs):
        np.testing.assert_array_equal(y, x.astype(np.float64) * 2)


@pytest.mark.parametrize("mode,message", [("drop_last", "1 of 9 requests unanswered"),
                                          ("twice", "request 0: answered twice"),
                                          ("unknown_id", "1 of 9 requests unanswered")])
@pytest.mark.parametrize("ordered", [True, False])
def test_a_stream_missing_results_raises(stand_in, inputs, mode, message, ordered):
    servicer, client = stand_in
    servicer.mode = mode
    before = servicer.received
    with pytest.raises(normsvc_client.NormsvcError) as error:
        bounded(lambda: list(client.normalize_stream(inputs, max_in_flight=20,
                                                     ordered=ordered)))
    assert error.value.code == grpc.StatusCode.INTERNAL
    assert message in error.value.details
    assert servicer.received - before == len(inputs)


def test_wire_dtype_names_and_values():
    assert tensors.wire_dtype("bf16") == pb.BF16
    assert tensors.wire_dtype(np.float16) == pb.FP16
    assert tensors.wire_dtype(np.dtype("float32")) == pb.FP32
    assert tensors.wire_dtype(pb.FP16) == pb.FP16
    for bad in ("int8", np.int8, 0, 7, True, pb.DTYPE_UNSPECIFIED):
        with pytest.raises(ValueError):
            tensors.wire_dtype(bad)


def test_arrays_that_are_not_real_numbers_are_refused(stand_in):
    servicer, client = stand_in
    for bad in (np.array([[1 + 2j, 3 - 1j]]), np.array([[True, False]]),
                np.array([["1.5", "2"]]), np.array([[object(), object()]])):
        with pytest.raises(ValueError):
            tensors.to_tensor(bad)
        with pytest.raises(ValueError):
            client.normalize(bad)
    ints = np.array([[3, -1, 4]], dtype=np.int64)
    np.testing.assert_array_equal(normsvc_client.from_tensor(tensors.to_tensor(ints)),
                                  np.array([[3.0, -1.0, 4.0]]))
