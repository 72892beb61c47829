"""The Python client's bearer token and mutual TLS against normsvc started
with --auth_token_file (plaintext) and with mutual TLS plus the token
(certificates made here with the openssl program)."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import normsvc_client
from conftest import Server, free_port

TOKEN = "python-client-token.42"

PKI_CONFIG = """[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
[server]
basicConstraints = critical, CA:FALSE
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
[client]
basicConstraints = critical, CA:FALSE
extendedKeyUsage = clientAuth
"""


def make_pki(directory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("the openssl program is missing (deploy/setup.sh --test installs it)")
    config = directory / "pki.cnf"
    config.write_text(PKI_CONFIG)

    def run(*args):
        subprocess.run([openssl, *map(str, args)], check=True, capture_output=True)

    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", "-new", *new_key, "-keyout", directory / "ca.key", "-out",
        directory / "ca.pem", "-days", "2", "-config", config, "-extensions", "ca",
        "-subj", "/CN=python test CA")
    for name, serial in (("server", 2), ("client", 3)):
        run("req", "-new", *new_key, "-keyout", directory / f"{name}.key", "-out",
            directory / f"{name}.csr", "-config", config, "-subj", f"/CN={name}")
        run("x509", "-req", "-in", directory / f"{name}.csr", "-CA", directory / "ca.pem",
            "-CAkey", directory / "ca.key", "-set_serial", serial, "-days", "2", "-extfile",
            config, "-extensions", name, "-out", directory / f"{name}.pem")
    return {name: (directory / name).read_bytes()
            for name in ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


def start_server(tmp_path, *flags):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    return Server([os.environ["NORMSVC_SERVER"], f"--grpc_address=127.0.0.1:{port}",
                   "--metrics_address=", "--backend=cpu", f"--auth_token_file={token_file}",
                   *flags], port, str(tmp_path / "normsvc.log"))


def rms_norm64(x, eps=1e-5):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)


def test_token_on_unary_calls_and_streams_and_health_without_it(tmp_path):
    server = start_server(tmp_path)
    try:
        rng = np.random.default_rng()
        x = rng.normal(0.3, 1.6, size=(4, 96)).astype(np.float32)
        with normsvc_client.Client(server.target, timeout=20, token=TOKEN) as client:
            y = client.normalize(x, op="rmsnorm")
            np.testing.assert_allclose(y, rms_norm64(x), rtol=1e-5, atol=1e-5)
            streamed = list(client.normalize_stream([x, x[:2]], op="rmsnorm"))
            np.testing.assert_allclose(streamed[1], rms_norm64(x[:2]), rtol=1e-5, atol=1e-5)
            assert client.server_info()["security"]["bearer_token_required"] is True
        with normsvc_client.Client(server.target, timeout=20) as anonymous:
            assert anonymous.health() == "SERVING"
            with pytest.raises(normsvc_client.NormsvcError) as refused:
                anonymous.normalize(x, op="rmsnorm")
            assert refused.value.code.name == "UNAUTHENTICATED"
            assert "requires a bearer token" in refused.value.details
        with normsvc_client.Client(server.target, timeout=20, token="wrong") as wrong:
            with pytest.raises(normsvc_client.NormsvcError) as refused:
                wrong.server_info()
            assert refused.value.code.name == "UNAUTHENTICATED"
            assert refused.value.details == "invalid bearer token"
    finally:
        assert server.stop() == 0, server.log()


def test_mutual_tls_with_the_token(tmp_path):
    pki = make_pki(tmp_path)
    server = start_server(tmp_path, f"--tls_cert_file={tmp_path / 'server.pem'}",
                          f"--tls_key_file={tmp_path / 'server.key'}",
                          f"--tls_client_ca_file={tmp_path / 'ca.pem'}")
    try:
        x = np.random.default_rng().normal(-0.2, 2.0, size=(2, 64)).astype(np.float32)
        with normsvc_client.Client(server.target, timeout=20, token=TOKEN,
                                   root_certificates=pki["ca.pem"],
                                   private_key=pki["client.key"],
                                   certificate_chain=pki["client.pem"]) as client:
            np.testing.assert_allclose(client.normalize(x, op="rmsnorm"), rms_norm64(x),
                                       rtol=1e-5, atol=1e-5)
            security = client.server_info()["security"]
            assert security == {"tls": True, "client_certificate_required": True,
                                "bearer_token_required": True}
        # Without a client certificate the handshake fails.
        with normsvc_client.Client(server.target, timeout=10, token=TOKEN,
                                   root_certificates=pki["ca.pem"]) as anonymous:
            with pytest.raises(normsvc_client.NormsvcError) as refused:
                anonymous.server_info()
            assert refused.value.code.name == "UNAVAILABLE"
    finally:
        assert server.stop() == 0, server.log()
