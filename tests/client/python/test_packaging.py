"""The Python client's declared versions agree with what its generated code
requires: grpcio-tools is pinned for the build (pyproject.toml) and for the
tests (tests/requirements.txt), and the declared runtime minimums of grpcio
and protobuf are the versions that the stubs it generates check for at
import time (GRPC_GENERATED_VERSION, ValidateProtobufRuntimeVersion)."""
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
PACKAGE = os.path.join(ROOT, "client", "python")


def version(text):
    return tuple(int(part) for part in text.split("."))


def requirements(lines):
    """{name: {operator: version}} of requirement strings like "a>=1,<2"."""
    out = {}
    for line in lines:
        line = line.split("#", 1)[0].split(";", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?\s*(.*)", line)
        if not match:
            continue
        specs = {}
        for spec in filter(None, (s.strip() for s in match.group(3).split(","))):
            op, value = re.fullmatch(r"(==|>=|<=|<|>|~=|!=)\s*(\S+)", spec).groups()
            specs[op] = value
        out[match.group(1).lower()] = specs
    return out


@pytest.fixture(scope="module")
def pyproject():
    with open(os.path.join(PACKAGE, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


@pytest.fixture(scope="module")
def test_requirements():
    with open(os.path.join(ROOT, "tests", "requirements.txt")) as f:
        return requirements(f)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Stubs generated now by the installed grpcio-tools, as the build does:
    (GRPC_GENERATED_VERSION, protobuf gencode version)."""
    from normsvc_client import _codegen

    out = tmp_path_factory.mktemp("stubs")
    _codegen.generate(os.path.join(ROOT, "proto"), str(out))
    v1 = out / "normsvc_client" / "_generated" / "normsvc" / "v1"
    grpc_version = re.search(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$",
                             (v1 / "normalizer_pb2_grpc.py").read_text(), re.M).group(1)
    check = re.search(r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,"
                      r"\s*(\d+),\s*(\d+),\s*(\d+),", (v1 / "normalizer_pb2.py").read_text())
    return grpc_version, ".".join(check.groups())


def test_grpcio_tools_is_pinned_alike_for_the_build_and_the_tests(pyproject, test_requirements):
    build = requirements(pyproject["build-system"]["requires"])
    assert list(build["grpcio-tools"]) == ["=="]
    assert test_requirements["grpcio-tools"] == build["grpcio-tools"]
    assert metadata.version("grpcio-tools") == build["grpcio-tools"]["=="]


def test_runtime_minimums_are_what_the_generated_stubs_require(pyproject, test_requirements,
                                                               generated):
    grpc_version, protobuf_version = generated
    pinned = requirements(pyproject["build-system"]["requires"])["grpcio-tools"]["=="]
    assert grpc_version == pinned
    runtime = requirements(pyproject["project"]["dependencies"])
    assert runtime["grpcio"][">="] == grpc_version
    assert runtime["protobuf"][">="] == protobuf_version
    assert version(runtime["protobuf"]["<"]) == (version(protobuf_version)[0] + 1,)
    for name in ("grpcio", "protobuf"):
        assert test_requirements[name] == runtime[name], name
    # The Python versions grpcio-tools supports.
    tools_python = metadata.metadata("grpcio-tools")["Requires-Python"]
    assert pyproject["project"]["requires-python"] == tools_python


def test_the_built_wheel_declares_those_versions(tmp_path, generated):
    """pip builds the wheel (no network: the installed, pinned grpcio-tools)."""
    grpc_version, protobuf_version = generated
    # A copy of client/python and proto/ as in the repository, so that the
    # build leaves nothing in the source tree.
    source = tmp_path / "src"
    shutil.copytree(PACKAGE, source / "client" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "_generated*",
                                                  "__pycache__"))
    shutil.copytree(os.path.join(ROOT, "proto"), source / "proto")
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation",
                          "--no-deps", "--no-index", "--disable-pip-version-check", "-q",
                          "-w", str(tmp_path), str(source / "client" / "python")],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert run.returncode == 0, run.stdout + run.stderr
    (wheel,) = tmp_path.glob("normsvc_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        declared = requirements(line.split(":", 1)[1] for line in
                                archive.read(meta).decode().splitlines()
                                if line.startswith("Requires-Dist:"))
        stub = archive.read("normsvc_client/_generated/normsvc/v1/normalizer_pb2_grpc.py").decode()
    assert f"GRPC_GENERATED_VERSION = '{grpc_version}'" in stub
    assert declared["grpcio"][">="] == grpc_version
    assert declared["protobuf"][">="] == protobuf_version


def test_source_checkout_regenerates_stubs_of_another_grpcio_tools(tmp_path):
    """Stubs written by another grpcio-tools would require another grpcio."""
    from normsvc_client import _codegen

    proto = os.path.join(ROOT, "proto")
    _codegen.generate(proto, str(tmp_path))
    stubs = tmp_path / "normsvc_client" / "_generated"
    assert _codegen._is_current(str(stubs), proto)
    grpc_file = stubs / "normsvc" / "v1" / "normalizer_pb2_grpc.py"
    text = grpc_file.read_text()
    old = f"GRPC_GENERATED_VERSION = '{metadata.version('grpcio-tools')}'"
    assert old in text
    grpc_file.write_text(text.replace(old, "GRPC_GENERATED_VERSION = '1.51.1'"))
    assert not _codegen._is_current(str(stubs), proto)
