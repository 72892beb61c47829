"""The generated protobuf and gRPC modules (generated on first use in a checkout)."""
import os

from . import _codegen

if not os.path.isfile(os.path.join(_codegen.PACKAGE_DIR, "_generated", "normsvc", "v1",
                                   "normalizer_pb2_grpc.py")):
    _root = _codegen.find_proto_root()
    if _root is None:
        raise ImportError("normsvc_client stubs are missing; install the package with pip")
    _codegen.generate(_root, os.path.dirname(_codegen.PACKAGE_DIR))

from ._generated.normsvc.v1 import normalizer_pb2 as pb  # noqa: E402
from ._generated.normsvc.v1 import normalizer_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["pb", "pb_grpc"]
