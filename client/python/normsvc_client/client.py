"""Client of the normsvc.v1.Normalizer service, with NumPy in and out."""
import collections
import os
import queue
import threading

import grpc
import numpy as np

from ._stubs import pb, pb_grpc
from .tensors import from_tensor, to_tensor, wire_dtype

_OPS = {"layernorm": pb.LAYER_NORM, "layer_norm": pb.LAYER_NORM,
        "rmsnorm": pb.RMS_NORM, "rms_norm": pb.RMS_NORM}

NormalizeResult = collections.namedtuple("NormalizeResult", "output residual_sum mean rstd")
BackwardResult = collections.namedtuple("BackwardResult", "grad_input grad_gamma grad_beta")


class NormsvcError(Exception):
    """A call failed: `code` is a grpc.StatusCode, `details` the server's message."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def _op(op):
    try:
        return _OPS[str(op).lower()]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; use layernorm or rmsnorm") from None


def _statistics_tensor(values, x, name):
    """Saved mean or rstd as the server takes them: fp32 of x's shape without
    its last axis, so a 1-D x's statistic is a scalar (shape [], as
    normalize returns it). Any array of that many values is accepted;
    another count raises ValueError."""
    shape = np.shape(x)[:-1]
    rows = int(np.prod(shape, dtype=np.int64))
    values = np.asarray(values, dtype=np.float32)
    if values.size != rows:
        raise ValueError(f"{name} has {values.size} values; x of shape {np.shape(x)} "
                         f"has {rows} rows")
    data = np.ascontiguousarray(values.reshape(shape), dtype="<f4").tobytes()
    return pb.Tensor(dtype=pb.FP32, shape=list(shape), data=data)


def default_target():
    """$NORMSVC_TARGET, else 127.0.0.1:50051."""
    return os.environ.get("NORMSVC_TARGET") or "127.0.0.1:50051"


class _CallDetails(collections.namedtuple(
        "_CallDetails", "method timeout metadata credentials wait_for_ready compression"),
        grpc.ClientCallDetails):
    pass


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                   grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds "authorization: Bearer <token>" to every call of a channel."""

    def __init__(self, token):
        self._entry = ("authorization", f"Bearer {token}")

    def _with_token(self, details):
        return _CallDetails(details.method, details.timeout,
                            list(details.metadata or []) + [self._entry], details.credentials,
                            details.wait_for_ready, getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation, details, request_iterator):
        return continuation(self._with_token(details), request_iterator)

    def intercept_stream_stream(self, continuation, details, request_iterator):
        return continuation(self._with_token(details), request_iterator)


class Client:
    """One channel to a normsvc server.

    target: "host:port" (default: $NORMSVC_TARGET, else 127.0.0.1:50051).
    timeout: default deadline of each call in seconds (None: no deadline).
    TLS: pass root_certificates (PEM bytes; None = system roots) and, for
    mutual TLS, private_key and certificate_chain; tls=True alone uses the
    system roots. token: bearer token for servers started with
    --auth_token_file, sent with every call (without TLS it crosses the
    network readable). options: extra grpc channel arguments.
    max_message_bytes: the largest message sent or received (-1, the
    default: no limit here; the server's --max_receive_message_bytes still
    bounds requests).
    """

    def __init__(self, target=None, *, timeout=30.0, tls=False, root_certificates=None,
                 private_key=None, certificate_chain=None, token=None, options=None,
                 max_message_bytes=-1):
        self.target = target or default_target()
        self.timeout = timeout
        channel_options = [("grpc.max_receive_message_length", max_message_bytes),
                           ("grpc.max_send_message_length", max_message_bytes)]
        channel_options += list(options or [])
        if tls or root_certificates or private_key or certificate_chain:
            credentials = grpc.ssl_channel_credentials(root_certificates, private_key,
                                                       certificate_chain)
            self._channel = grpc.secure_channel(self.target, credentials, channel_options)
        else:
            self._channel = grpc.insecure_channel(self.target, channel_options)
        if token:
            self._channel = grpc.intercept_channel(self._channel, _BearerToken(token))
        self._stub = pb_grpc.NormalizerStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout):
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as error:
            raise NormsvcError(error.code(), error.details()) from None

    def _parameters(self, gamma, beta, params, dtype):
        if params is not None:
            if gamma is not None or beta is not None:
                raise ValueError("give either params=NAME or gamma/beta, not both")
            return pb.Parameters(name=params)
        if gamma is None and beta is None:
            return None
        inline = pb.Parameters.Inline()
        if gamma is not None:
            inline.gamma.CopyFrom(to_tensor(gamma, dtype))
        if beta is not None:
            inline.beta.CopyFrom(to_tensor(beta, dtype))
        return pb.Parameters(inline=inline)

    def _request_template(self, *, op="layernorm", gamma=None, beta=None, params=None, eps=1e-5,
                          return_residual_sum=False, return_statistics=False, dtype=None,
                          out_dtype=None):
        """A NormalizeRequest with everything but the input, residual and id.

        Checks op, dtype, out_dtype and the parameters (ValueError) before
        anything is sent.
        """
        if dtype is not None:
            dtype = wire_dtype(dtype)
        request = pb.NormalizeRequest(op=_op(op), epsilon=eps,
                                      return_residual_sum=return_residual_sum,
                                      return_statistics=return_statistics)
        parameters = self._parameters(gamma, beta, params, dtype)
        if parameters is not None:
            request.parameters.CopyFrom(parameters)
        if out_dtype is not None:
            request.output_dtype = wire_dtype(out_dtype)
        return request

    @staticmethod
    def _fill_request(template, x, residual, dtype, request_id):
        request = pb.NormalizeRequest()
        request.CopyFrom(template)
        request.request_id = request_id
        request.input.CopyFrom(to_tensor(x, dtype))
        if residual is not None:
            request.residual.CopyFrom(to_tensor(residual, request.input.dtype))
        return request

    def normalize_request(self, x, *, op="layernorm", gamma=None, beta=None, params=None,
                          eps=1e-5, residual=None, return_residual_sum=False,
                          return_statistics=False, dtype=None, out_dtype=None, request_id=0):
        """The NormalizeRequest that normalize() sends (also for streams)."""
        template = self._request_template(
            op=op, gamma=gamma, beta=beta, params=params, eps=eps,
            return_residual_sum=return_residual_sum, return_statistics=return_statistics,
            dtype=dtype, out_dtype=out_dtype)
        return self._fill_request(template, x, residual, dtype, request_id)

    @staticmethod
    def _result(response, extras):
        output = from_tensor(response.output)
        if not extras:
            return output
        return NormalizeResult(
            output,
            from_tensor(response.residual_sum) if response.HasField("residual_sum") else None,
            from_tensor(response.mean) if response.HasField("mean") else None,
            from_tensor(response.rstd) if response.HasField("rstd") else None)

    def normalize(self, x, *, op="layernorm", gamma=None, beta=None, params=None, eps=1e-5,
                  residual=None, return_residual_sum=False, return_statistics=False, dtype=None,
                  out_dtype=None, timeout=None):
        """LayerNorm/RMSNorm of x over its last axis.

        Returns the output array, or a NormalizeResult(output, residual_sum,
        mean, rstd) when return_residual_sum or return_statistics is set.
        dtype: wire dtype of x ("fp32", "fp16", "bf16", NumPy's float32 or
        float16 dtype, or a pb.DType value; default from x: float16 -> fp16,
        ml_dtypes.bfloat16 -> bf16, else fp32;
        "bf16" rounds x to bf16); x must hold real numbers (floating point
        or integer), else ValueError. gamma/beta are sent inline (in dtype
        when it is given, else float16 as fp16 and anything else as fp32),
        or params names a registered set.
        """
        request = self.normalize_request(
            x, op=op, gamma=gamma, beta=beta, params=params, eps=eps, residual=residual,
            return_residual_sum=return_residual_sum, return_statistics=return_statistics,
            dtype=dtype, out_dtype=out_dtype)
        response = self._call(self._stub.Normalize, request, timeout)
        return self._result(response, return_residual_sum or return_statistics)

    def normalize_backward(self, x, grad_output, *, op="layernorm", gamma=None, params=None,
                           eps=1e-5, mean=None, rstd=None, dtype=None, timeout=None):
        """Gradients: BackwardResult(grad_input, grad_gamma, grad_beta)."""
        request = pb.NormalizeBackwardRequest(op=_op(op), epsilon=eps)
        request.input.CopyFrom(to_tensor(x, dtype))
        request.grad_output.CopyFrom(to_tensor(grad_output, request.input.dtype))
        parameters = self._parameters(gamma, None, params, dtype)
        if parameters is not None:
            request.parameters.CopyFrom(parameters)
        if mean is not None:
            request.mean.CopyFrom(_statistics_tensor(mean, x, "mean"))
        if rstd is not None:
            request.rstd.CopyFrom(_statistics_tensor(rstd, x, "rstd"))
        response = self._call(self._stub.NormalizeBackward, request, timeout)
        return BackwardResult(
            from_tensor(response.grad_input),
            from_tensor(response.grad_gamma) if response.HasField("grad_gamma") else None,
            from_tensor(response.grad_beta) if response.HasField("grad_beta") else None)

    def register_parameters(self, name, gamma=None, beta=None, *, dtype=None, replace=False,
                            timeout=None):
        """Registers a named gamma/beta set; returns its info as a dict."""
        request = pb.RegisterParametersRequest(name=name, replace=replace)
        if gamma is not None:
            request.gamma.CopyFrom(to_tensor(gamma, dtype))
        if beta is not None:
            request.beta.CopyFrom(to_tensor(beta, dtype))
        response = self._call(self._stub.RegisterParameters, request, timeout)
        return _set_info(response.info)

    def delete_parameters(self, name, *, timeout=None):
        self._call(self._stub.DeleteParameters, pb.DeleteParametersRequest(name=name), timeout)

    def list_parameters(self, *, timeout=None):
        """Registered sets as dicts (name, hidden_size, dtype, has_gamma, has_beta, bytes)."""
        response = self._call(self._stub.ListParameters, pb.ListParametersRequest(), timeout)
        return [_set_info(info) for info in response.parameter_sets]

    def server_info(self, *, timeout=None):
        """GetServerInfo as a dict (version, backend, devices, limits, batching, security)."""
        from google.protobuf import json_format

        response = self._call(self._stub.GetServerInfo, pb.GetServerInfoRequest(), timeout)
        return json_format.MessageToDict(response, preserving_proto_field_name=True)

    def health(self, service="", *, timeout=None):
        """grpc.health.v1 status name, e.g. "SERVING" (hand-encoded request)."""
        check = self._channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=_encode_health_request,
            response_deserializer=lambda data: data)
        try:
            data = check(service, timeout=self.timeout if timeout is None else timeout)
        except grpc.RpcError as error:
            raise NormsvcError(error.code(), error.details()) from None
        status = data[1] if len(data) >= 2 and data[0] == 0x08 else 0
        return {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}.get(status,
                                                                                     "UNKNOWN")

    def normalize_stream(self, inputs, *, max_in_flight=64, ordered=True, timeout=None,
                         **kwargs):
        """Normalizes each array of `inputs` over one NormalizeStream.

        Returns an iterator of outputs (or NormalizeResults, as normalize()
        would return) in input order when ordered=True, else of (index,
        result) pairs in completion order. At most max_in_flight (>= 1)
        requests are outstanding. kwargs: as for normalize(); they are
        checked here, before the stream starts (ValueError, TypeError).
        timeout: deadline of the whole stream in seconds (default: none; a
        stream lasts as long as its inputs, unlike a call, so the client's
        per-call timeout does not apply). A per-request error, the deadline
        or a stream that ends
        without a result for every request raises NormsvcError; an exception
        raised while reading `inputs` or encoding one of them cancels the
        stream and is raised again here.
        """
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int):
            raise TypeError(f"max_in_flight must be an int, not {type(max_in_flight).__name__}")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1, not {max_in_flight}")
        unknown = sorted(set(kwargs) - _STREAM_KWARGS)
        if unknown:
            raise TypeError(f"normalize_stream() got unexpected keyword arguments {unknown}")
        residual = kwargs.pop("residual", None)
        dtype = kwargs.get("dtype")
        template = self._request_template(**kwargs)
        if dtype is not None:
            dtype = wire_dtype(dtype)
        extras = bool(kwargs.get("return_residual_sum") or kwargs.get("return_statistics"))
        return self._stream(iter(inputs), template, residual, dtype, extras, max_in_flight,
                            ordered, timeout)

    def _stream(self, inputs, template, residual, dtype, extras, max_in_flight, ordered,
                timeout):
        window = threading.Semaphore(max_in_flight)
        done = object()
        requests = queue.Queue()
        stopped = threading.Event()
        state = {"sent": 0, "finished": False, "error": None}

        def request_iterator():
            while True:
                item = requests.get()
                if item is done:
                    return
                yield item

        responses = self._stub.NormalizeStream(request_iterator(), timeout=timeout)

        def produce():
            try:
                for index, x in enumerate(inputs):
                    window.acquire()
                    if stopped.is_set():
                        return
                    requests.put(self._fill_request(template, x, residual, dtype, index))
                    state["sent"] = index + 1
                state["finished"] = True
            except BaseException as error:  # handed to the caller's thread
                state["error"] = error
                responses.cancel()
            finally:
                requests.put(done)

        producer = threading.Thread(target=produce, name="normsvc-stream-producer", daemon=True)
        producer.start()
        pending = {}
        received = set()
        next_index = 0
        try:
            try:
                for message in responses:
                    window.release()
                    if message.HasField("error"):
                        raise NormsvcError(grpc.StatusCode(_code_tuple(message.error.code)),
                                           f"request {message.request_id}: "
                                           f"{message.error.message}")
                    index = message.request_id
                    if index in received:
                        raise NormsvcError(grpc.StatusCode.INTERNAL,
                                           f"request {index}: answered twice")
                    received.add(index)
                    result = self._result(message.response, extras)
                    if not ordered:
                        yield index, result
                        continue
                    pending[index] = result
                    while next_index in pending:
                        yield pending.pop(next_index)
                        next_index += 1
            except grpc.RpcError as error:
                if state["error"] is not None:
                    raise state["error"] from None
                raise NormsvcError(error.code(), error.details()) from None
            # The server ends the stream once it has read the half-close,
            # which the producer sends after its last request.
            producer.join(timeout=5)
            if state["error"] is not None:
                raise state["error"]
            if not state["finished"]:
                raise NormsvcError(grpc.StatusCode.INTERNAL,
                                   "the stream ended before every request was sent")
            unanswered = state["sent"] - len(received & set(range(state["sent"])))
            if unanswered or len(received) != state["sent"]:
                raise NormsvcError(grpc.StatusCode.INTERNAL,
                                   f"the stream ended with {unanswered} of {state['sent']} "
                                   f"requests unanswered")
        finally:
            stopped.set()
            window.release()  # unblocks a producer waiting for a slot
            responses.cancel()
            requests.put(done)  # ends the request iterator if the producer did not
            producer.join(timeout=1)  # it may be inside `inputs`; it stops at its next item


_STREAM_KWARGS = frozenset({"op", "gamma", "beta", "params", "eps", "residual",
                            "return_residual_sum", "return_statistics", "dtype", "out_dtype"})


def _encode_health_request(service):
    """grpc.health.v1.HealthCheckRequest{service} in protobuf wire format."""
    name = service.encode()
    if not name:
        return b""
    length, size = bytearray(), len(name)
    while size >= 0x80:
        length.append((size & 0x7F) | 0x80)
        size >>= 7
    length.append(size)
    return b"\x0a" + bytes(length) + name


def _code_tuple(code):
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status.value
    return grpc.StatusCode.UNKNOWN.value


def _set_info(info):
    return {"name": info.name, "hidden_size": info.hidden_size,
            "dtype": pb.DType.Name(info.dtype), "has_gamma": info.has_gamma,
            "has_beta": info.has_beta, "bytes": info.bytes}


__all__ = ["Client", "NormsvcError", "NormalizeResult", "BackwardResult", "default_target"]
