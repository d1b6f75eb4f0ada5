"""TLS on the gRPC port (GRPC_SERVER_USE_TLS), and mutual TLS (GRPC_CLIENT_TLS_CACERT): a CA, the
server's certificate for 127.0.0.1 and a client's, made by Debian's openssl for the test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from conftest import OK, Gateway, descriptor

RULES = "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=test ca", cwd=d)
    for name, ext in [("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
    return d


def ask(g: Gateway, credentials: grpc.ChannelCredentials) -> rls_pb2.RateLimitResponse:
    with grpc.secure_channel(f"127.0.0.1:{g.grpc_port}", credentials) as channel:
        return rls_pb2_grpc.RateLimitServiceStub(channel).ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain="api", descriptors=[descriptor(("user", "a"))]), timeout=60)


def test_tls(gateways, pki: Path) -> None:
    g = gateways({"api.yaml": RULES}, {
        "GRPC_SERVER_USE_TLS": "true",
        "GRPC_SERVER_TLS_CERT": str(pki / "server.pem"),
        "GRPC_SERVER_TLS_KEY": str(pki / "server.key"),
    })
    r = ask(g, grpc.ssl_channel_credentials(root_certificates=(pki / "ca.pem").read_bytes()))
    assert (r.overall_code, r.statuses[0].limit_remaining) == (OK, 4)
    # Plain gRPC is not served there.
    with pytest.raises(grpc.RpcError) as e:
        g.should("api", descriptor(("user", "a")))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls(gateways, pki: Path) -> None:
    g = gateways({"api.yaml": RULES}, {
        "GRPC_SERVER_USE_TLS": "true",
        "GRPC_SERVER_TLS_CERT": str(pki / "server.pem"),
        "GRPC_SERVER_TLS_KEY": str(pki / "server.key"),
        "GRPC_CLIENT_TLS_CACERT": str(pki / "ca.pem"),
    })
    ca = (pki / "ca.pem").read_bytes()
    with pytest.raises(grpc.RpcError) as e:
        ask(g, grpc.ssl_channel_credentials(root_certificates=ca))
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    client = grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=(pki / "client.key").read_bytes(),
        certificate_chain=(pki / "client.pem").read_bytes())
    assert ask(g, client).statuses[0].limit_remaining == 4


def test_a_missing_certificate_stops_it(tmp_path: Path, redis_server, pki: Path) -> None:
    g = Gateway(tmp_path, f"127.0.0.1:{redis_server.port}", {"api.yaml": RULES}, {
        "GRPC_SERVER_USE_TLS": "true",
        "GRPC_SERVER_TLS_CERT": str(pki / "missing.pem"),
        "GRPC_SERVER_TLS_KEY": str(pki / "server.key"),
    }, ready=False)
    assert g.proc.wait(60) == 1
    assert f"GRPC_SERVER_USE_TLS: {pki / 'missing.pem'}: No such file or directory" in g.log()
