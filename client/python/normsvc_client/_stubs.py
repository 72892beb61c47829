"""The generated protobuf and gRPC modules.

In a source checkout they are generated on first import (and again when
the proto is newer than them); an installed package carries them.
"""
import os

from . import _codegen

_root = _codegen.find_proto_root()
if not _codegen.stubs_are_current(_root):
    if _root is None:
        raise ImportError("normsvc_client stubs are missing; install the package with pip")
    _codegen.generate(_root, os.path.dirname(_codegen.PACKAGE_DIR))

from ._generated.normsvc.v1 import normalizer_pb2 as pb  # noqa: E402
from ._generated.normsvc.v1 import normalizer_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["pb", "pb_grpc"]
