"""Python client of normsvc, the LayerNorm/RMSNorm gRPC service.

    from normsvc_client import Client
    with Client("127.0.0.1:50051") as client:
        y = client.normalize(x, op="layernorm", gamma=g, beta=b)

Module-level helpers use one shared client per target (see normalize()).
"""
from .client import (BackwardResult, Client, NormalizeResult, NormsvcError,  # noqa: F401
                     default_target)
from .tensors import bf16_bits_to_float, float_to_bf16_bits, from_tensor, to_tensor  # noqa: F401

_clients = {}


def _client(target):
    target = target or default_target()
    if target not in _clients:
        _clients[target] = Client(target)
    return _clients[target]


def normalize(x, *, target=None, **kwargs):
    """Client(target).normalize(x, **kwargs) on a cached client."""
    return _client(target).normalize(x, **kwargs)


def normalize_backward(x, grad_output, *, target=None, **kwargs):
    return _client(target).normalize_backward(x, grad_output, **kwargs)


def normalize_stream(inputs, *, target=None, **kwargs):
    return _client(target).normalize_stream(inputs, **kwargs)


def register_parameters(name, gamma=None, beta=None, *, target=None, **kwargs):
    return _client(target).register_parameters(name, gamma, beta, **kwargs)


def delete_parameters(name, *, target=None, **kwargs):
    return _client(target).delete_parameters(name, **kwargs)


def list_parameters(*, target=None, **kwargs):
    return _client(target).list_parameters(**kwargs)


def server_info(*, target=None, **kwargs):
    return _client(target).server_info(**kwargs)
