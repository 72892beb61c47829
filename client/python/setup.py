"""Generates the gRPC stubs from ../../proto while the package is built.

pip builds the package in place (pip >= 21.3), so the repository's proto
directory is reachable; an sdist or a tree that already holds
normsvc_client/_generated is used as it is. Stubs are generated only with
the grpcio-tools version that pyproject.toml pins, whose stubs need the
grpcio and protobuf versions it declares.
"""
import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def _pinned_grpcio_tools():
    """The grpcio-tools version pinned in pyproject.toml's build requirements."""
    with open(os.path.join(HERE, "pyproject.toml")) as f:
        match = re.search(r'"grpcio-tools==([^"]+)"', f.read())
    if match is None:
        raise RuntimeError("pyproject.toml pins no grpcio-tools version")
    return match.group(1)


class BuildWithStubs(build_py):
    def run(self):
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "_codegen", os.path.join(HERE, "normsvc_client", "_codegen.py"))
        codegen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(codegen)
        proto_root = codegen.find_proto_root()
        if proto_root is not None:
            pinned = _pinned_grpcio_tools()
            installed = codegen.installed_grpcio_tools()
            if installed != pinned:
                # Its stubs would require another grpcio and protobuf than
                # the dependencies pyproject.toml declares.
                raise RuntimeError(f"building needs grpcio-tools=={pinned} (pyproject.toml); "
                                   f"found {installed}")
            codegen.generate(proto_root, HERE)
        elif not os.path.isdir(os.path.join(HERE, "normsvc_client", "_generated")):
            raise RuntimeError("proto/normsvc/v1/normalizer.proto not found and no generated stubs")
        super().run()
        # Generated modules are not listed packages; copy them explicitly.
        generated = os.path.join("normsvc_client", "_generated")
        for root, _, files in os.walk(os.path.join(HERE, generated)):
            for name in files:
                if name.endswith(".py"):
                    source = os.path.join(root, name)
                    relative = os.path.relpath(source, HERE)
                    target = os.path.join(self.build_lib, relative)
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    self.copy_file(source, target)


setup(cmdclass={"build_py": BuildWithStubs})
