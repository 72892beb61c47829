"""The container image's Dockerfile, checked by reading it (no container
engine in the test environment) and by running the install step it runs:
the build stage installs exactly deploy/packages.txt, the README's list,
through the README's own install script, and holds no second copy."""
import fnmatch
import os
import pathlib
import re
import shlex
import subprocess

import pytest
import yaml

from conftest import DEPLOY, K8S, REPO, render, one

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
DOCKERIGNORE = DEPLOY / "docker" / "Dockerfile.dockerignore"


def instructions(text):
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        if raw.lstrip().startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        current += raw
        if current.strip():
            lines.append(current.strip())
        current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
            for line in lines]


def stages():
    """{stage name: [(instruction, args)]}; the FROM line opens each stage."""
    result, name = {}, None
    for instruction, args in instructions(DOCKERFILE.read_text()):
        if instruction == "FROM":
            words = args.split()
            name = words[words.index("AS") + 1] if "AS" in words else words[0]
            result[name] = [(instruction, args)]
        elif name is not None:
            result[name].append((instruction, args))
    return result


def packages_txt():
    names = []
    for line in (DEPLOY / "packages.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return names


def apt_installed_words(run_args):
    """Words after each `apt-get install` in a RUN, up to the next && or ;"""
    words = []
    for part in re.split(r"&&|;|\|\|", run_args):
        tokens = part.split()
        if "apt-get" in tokens and "install" in tokens:
            words += [t.strip('"') for t in tokens[tokens.index("install") + 1:] if not t.startswith("-")]
    return words


def test_stages_and_bases():
    s = stages()
    assert list(s) == ["build", "runtime"]
    # deploy/packages.txt is for Debian 12: the build stage is Debian 12, and
    # CUDA comes from NVIDIA's repository for that same release.
    assert s["build"][0][1].split()[0] == "debian:12"
    assert s["runtime"][0][1].split()[0] == "debian:12-slim"
    build_runs = " ".join(a for i, a in s["build"] if i == "RUN")
    assert "/compute/cuda/repos/debian12/" in build_runs
    assert "cuda-minimal-build-" in build_runs


def test_build_stage_installs_packages_txt_through_setup_sh():
    runs = [a for i, a in stages()["build"] if i == "RUN"]
    setup_runs = [a for a in runs if "deploy/setup.sh" in a]
    assert len(setup_runs) == 1, "the build stage runs the README's install step once"
    run = setup_runs[0]
    mount = re.search(r"--mount=type=bind,source=deploy,target=(\S+)", run)
    assert mount, "deploy/ comes from the build context, so packages.txt is read, not copied"
    assert f"{mount.group(1)}/setup.sh" in run
    assert "--test" not in run
    # The README's install step is the same script.
    assert "deploy/setup.sh" in (REPO / "README.md").read_text()


def test_dockerfile_holds_no_copy_of_the_list():
    listed = set(packages_txt())
    text = DOCKERFILE.read_text()
    for stage, steps in stages().items():
        for instruction, args in steps:
            if instruction == "RUN":
                duplicated = listed & set(apt_installed_words(args))
                assert not duplicated, f"{stage} installs {duplicated} itself"
    assert "packages.txt" not in re.sub(r"#.*", "", text).replace("deploy/setup.sh", "")


def test_setup_sh_installs_exactly_packages_txt(tmp_path):
    """Runs deploy/setup.sh (what the build stage runs) with apt-get and
    dpkg-query replaced by recorders, on a system where nothing is installed."""
    record = tmp_path / "apt-get.calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {record}\n')
    (bin_dir / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "sudo").write_text('#!/bin/sh\nexec "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    subprocess.run(["bash", str(DEPLOY / "setup.sh")], check=True, env=env, timeout=60,
                   capture_output=True)
    installs = [line.split() for line in record.read_text().splitlines() if " install " in f" {line} "]
    assert len(installs) == 1
    installed = [w for w in installs[0][installs[0].index("install") + 1:] if not w.startswith("-")]
    assert sorted(installed) == sorted(packages_txt())
    assert len(installed) == len(set(installed))


def test_runtime_stage():
    steps = stages()["runtime"]
    runs = " ".join(a for i, a in steps if i == "RUN")
    assert "setup.sh" not in runs, "the runtime stage carries no build tools"
    for dev in apt_installed_words(runs):
        assert not dev.endswith("-dev"), dev
    (user,) = [a for i, a in steps if i == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric, non-root: runAsNonRoot can verify it"
    (entrypoint,) = [a for i, a in steps if i == "ENTRYPOINT"]
    assert yaml.safe_load(entrypoint) == ["/usr/local/bin/normsvc"]
    (expose,) = [a for i, a in steps if i == "EXPOSE"]
    # The same ports the Kubernetes manifests use.
    deployment = one(render(K8S / "overlays" / "cpu"), "Deployment") if _have_kubectl() else None
    if deployment is not None:
        ports = {p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {int(p) for p in expose.split()} == ports
        uid_k8s = deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        assert int(uid) == uid_k8s
    else:
        assert {int(p) for p in expose.split()} == {50051, 9464}


def _have_kubectl():
    import shutil
    return shutil.which("kubectl") is not None


def ignored(path, patterns):
    parts = pathlib.PurePosixPath(path).parts
    for pattern in patterns:
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix, pattern.replace("**/", "*/")):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pattern[3:]):
                return True
    return False


def test_dockerignore_keeps_sources_and_drops_build_outputs():
    patterns = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked
    dropped = [f for f in tracked if ignored(f, patterns)]
    assert not dropped, f"tracked files left out of the image build: {dropped}"
    for output in ("build/release/CMakeCache.txt", "build-deploy/x", ".venv/bin/python",
                   "client/python/normsvc_client/_generated/x_pb2.py", "server/__pycache__/a.pyc"):
        assert ignored(output, patterns), output


@pytest.mark.skipif("NORMSVC_BINARY" not in os.environ, reason="needs NORMSVC_BINARY (the built server)")
def test_runtime_packages_cover_the_binary():
    """Every shared library the built normsvc links is in a package the
    runtime stage installs (or one they pull in), except the GPU driver's,
    which the NVIDIA container runtime mounts. Uses this machine's dpkg and
    apt metadata: the same Debian 12 packages the image uses."""
    binary = os.environ["NORMSVC_BINARY"]
    runs = " ".join(a for i, a in stages()["runtime"] if i == "RUN")
    runtime = {w for w in apt_installed_words(runs) if not w.startswith("cuda-")}
    closure = set(subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
         "--no-breaks", "--no-replaces", "--no-enhances", *sorted(runtime)],
        capture_output=True, text=True, check=True, timeout=120).stdout.split())
    closure = {w.split(":")[0] for w in closure if not w.startswith("<")}
    closure |= runtime | {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}  # in debian:12-slim
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    for line in ldd.splitlines():
        match = re.match(r"\s*(\S+) => (\S+)", line)
        if not match:
            continue
        soname, path = match.groups()
        if soname.startswith(("libcuda.so", "libnvidia-ml.so")):
            continue  # the GPU driver's, mounted by the NVIDIA container runtime
        if soname.startswith(("libasan.so", "libubsan.so", "libtsan.so", "libnormsvc_tsan_absl_sync.so")):
            continue  # sanitizer presets link their runtimes (and tests/tsan's); the image is a Release build
        if soname.startswith("libcudart.so"):
            assert "cuda-cudart-" in runs
            continue
        package = owning_package(path)
        assert package, f"{soname} ({path}) belongs to no Debian package"
        assert package in closure, f"{soname} comes from {package}, which the runtime stage lacks"


def owning_package(path):
    """The Debian package that installed a library, trying the spellings
    dpkg may have recorded (/lib and /usr/lib are one directory on Debian 12)."""
    real = os.path.realpath(path)
    candidates = []
    for p in (path, real, os.path.join(os.path.dirname(path), os.path.basename(real))):
        candidates += [p, p[4:] if p.startswith("/usr/") else "/usr" + p]
    for candidate in candidates:
        owner = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
        if owner.returncode == 0:
            return owner.stdout.split(":")[0]
    return None
