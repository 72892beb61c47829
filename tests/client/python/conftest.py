"""Servers for the Python client tests, started on free loopback ports."""
import os
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

import normsvc_client


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.02)
    return False


def bounded(function, seconds=10.0):
    """function() in a thread: its result, or its exception raised here; fails
    the test if it has not returned within `seconds` (instead of hanging)."""
    outcome = {}

    def run():
        try:
            outcome["result"] = function()
        except BaseException as error:  # noqa: B902 - handed to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


class Server:
    def __init__(self, argv, port, log_path):
        self.port = port
        self.target = f"127.0.0.1:{port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL)
        if not wait_for_port(port):
            self.stop()
            raise RuntimeError(f"{argv[0]} did not listen on {port}:\n{self.log()}")

    def log(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("echo") / "echo.log"
    server = Server([os.environ["NORMSVC_ECHO"], f"--address=127.0.0.1:{port}"], port, str(log))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def normsvc_server(tmp_path_factory):
    port, metrics_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("normsvc") / "normsvc.log"
    server = Server([os.environ["NORMSVC_SERVER"], f"--grpc_address=127.0.0.1:{port}",
                     f"--metrics_address=127.0.0.1:{metrics_port}", "--backend=cpu"],
                    port, str(log))
    with normsvc_client.Client(server.target, timeout=10) as client:
        deadline = time.monotonic() + 20
        while client.health() != "SERVING" and time.monotonic() < deadline:
            time.sleep(0.05)
    yield server
    assert server.stop() == 0, server.log()


def echo_counts(log_text):
    match = re.search(r"served normalize=(\d+) stream_messages=(\d+)", log_text)
    return (int(match.group(1)), int(match.group(2))) if match else None
