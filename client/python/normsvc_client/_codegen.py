"""Generates normalizer_pb2 / normalizer_pb2_grpc from the repository's proto.

The proto is compiled under the virtual path
normsvc_client/_generated/normsvc/v1/normalizer.proto so that the generated
modules import each other inside this package. Run by setup.py at build
time, and on first import when the package is used from a source checkout.
"""
import os
import shutil
import tempfile

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
PROTO_RELATIVE = os.path.join("normsvc", "v1", "normalizer.proto")


def find_proto_root():
    """The repository's proto/ directory, or None outside a checkout."""
    candidate = os.path.normpath(os.path.join(PACKAGE_DIR, "..", "..", "..", "proto"))
    if os.path.isfile(os.path.join(candidate, PROTO_RELATIVE)):
        return candidate
    return None


def stubs_are_current(proto_root):
    """True when generated stubs exist and are newer than the proto."""
    return _is_current(os.path.join(PACKAGE_DIR, "_generated"), proto_root)


def installed_grpcio_tools():
    """The installed grpcio-tools version, or None."""
    from importlib import metadata

    try:
        return metadata.version("grpcio-tools")
    except metadata.PackageNotFoundError:
        return None


def generated_grpc_version(generated_dir):
    """GRPC_GENERATED_VERSION of the stubs in generated_dir (the grpcio-tools
    version that wrote them, and the oldest grpcio they load with), or None."""
    path = os.path.join(generated_dir, "normsvc", "v1", "normalizer_pb2_grpc.py")
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("GRPC_GENERATED_VERSION = "):
                    return line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    return None


def _is_current(generated_dir, proto_root):
    generated = os.path.join(generated_dir, "normsvc", "v1", "normalizer_pb2_grpc.py")
    if not os.path.isfile(generated):
        return False
    if proto_root is None:
        return True
    if os.path.getmtime(generated) < os.path.getmtime(os.path.join(proto_root, PROTO_RELATIVE)):
        return False
    # Stubs of another grpcio-tools may require another grpcio: write them again.
    tools = installed_grpcio_tools()
    return tools is None or generated_grpc_version(generated_dir) == tools


def generate(proto_root, out_root):
    """Writes out_root/normsvc_client/_generated/... atomically."""
    from grpc_tools import protoc
    import grpc_tools

    scratch = tempfile.mkdtemp(prefix="normsvc-stubs-")
    try:
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        args = [
            "grpc_tools.protoc",
            "-Inormsvc_client/_generated=" + proto_root,
            "-I" + well_known,
            "--python_out=" + scratch,
            "--grpc_python_out=" + scratch,
            os.path.join(proto_root, PROTO_RELATIVE),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError("grpc_tools.protoc failed on " + proto_root)
        generated = os.path.join(scratch, "normsvc_client", "_generated")
        for directory in ("", "normsvc", os.path.join("normsvc", "v1")):
            open(os.path.join(generated, directory, "__init__.py"), "a").close()
        target = os.path.join(out_root, "normsvc_client", "_generated")
        staging = target + ".new-" + str(os.getpid())
        shutil.copytree(generated, staging)
        if os.path.isdir(target) and _is_current(target, proto_root):
            shutil.rmtree(staging, ignore_errors=True)  # generated meanwhile by another process
            return
        if os.path.isdir(target):  # stale: replace it
            retired = target + ".old-" + str(os.getpid())
            try:
                os.rename(target, retired)
                shutil.rmtree(retired, ignore_errors=True)
            except OSError:
                pass
        try:
            os.rename(staging, target)
        except OSError:  # another process generated it meanwhile
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
