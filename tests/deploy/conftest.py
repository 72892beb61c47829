"""Shared helpers for the deploy tests: repository paths and rendering."""
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
OVERLAYS = ("gpu", "cpu")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def render(kustomization_dir):
    """Objects of `kubectl kustomize <dir>`, as dicts."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl not on PATH: deploy/setup.sh --test installs it into .venv/bin "
                    "(tests/requirements.txt), which ctest puts first on PATH")
    out = subprocess.run([kubectl, "kustomize", str(kustomization_dir)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert found, f"no {kind} rendered"
    return found


def one(objects, kind, name=None):
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def require_tool(name):
    """Path of a tool that deploy/packages-test.txt installs; fails loudly if absent."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not on PATH: install the test packages with `deploy/setup.sh --test` "
                    f"(deploy/packages-test.txt)")
    return path
