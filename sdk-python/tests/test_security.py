"""API keys (argument, file, environment) against a server with --auth, and TLS with
a CA file and mutual TLS against one serving certificates made here."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import railyard
from tests.conftest import WORKFLOWS
from tests.support import Server


@pytest.fixture(scope="module")
def auth_server() -> Iterator[Server]:
    s = Server({"tour": WORKFLOWS["tour"]}, ["--auth"])
    yield s
    s.stop()


async def test_api_keys(auth_server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    key_file = auth_server.data / "admin.key"
    key = key_file.read_text().strip()
    async with railyard.AsyncClient(auth_server.url) as anonymous:
        with pytest.raises(railyard.Unauthenticated):
            await anonymous.list_workflows()
    async with railyard.AsyncClient(auth_server.url, api_key="ry_not_a_key") as wrong:
        with pytest.raises(railyard.Unauthenticated):
            await wrong.list_workflows()
    async with railyard.AsyncClient(auth_server.url, api_key_file=key_file) as by_file:
        assert [w.id for w in (await by_file.list_workflows()).workflows] == ["tour"]
        assert key not in repr(by_file)
    monkeypatch.setenv("RAILYARD_SERVER", auth_server.url)
    monkeypatch.setenv("RAILYARD_API_KEY", key)
    monkeypatch.setenv("RAILYARD_NAMESPACE", "default")
    async with railyard.AsyncClient() as by_env:
        assert by_env.server == auth_server.url
        assert (await by_env.start_run("tour")).started
    monkeypatch.setenv("RAILYARD_API_KEY", "wrong")
    monkeypatch.setenv("RAILYARD_API_KEY_FILE", str(key_file))
    async with railyard.AsyncClient() as file_wins:
        await file_wins.list_workflows()


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> None:
    """A CA, a server certificate for localhost and a client certificate."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=test ca", "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    (d / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", "ext.cnf",
                "-out", f"{name}.pem", cwd=d)  # fmt: skip


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
async def test_tls_and_mutual_tls(tmp_path: Path) -> None:
    make_certs(tmp_path)
    server = Server(
        {"tour": WORKFLOWS["tour"]},
        [
            "--tls-cert", str(tmp_path / "server.pem"),
            "--tls-key", str(tmp_path / "server.key"),
            "--tls-client-ca", str(tmp_path / "ca.pem"),
        ],
    )  # fmt: skip
    try:
        url = server.url.replace("http://127.0.0.1", "https://localhost")
        async with railyard.AsyncClient(
            url,
            tls_ca=tmp_path / "ca.pem",
            tls_cert=tmp_path / "client.pem",
            tls_key=tmp_path / "client.key",
        ) as c:
            run = await c.start_run("tour", "over mutual TLS")
            assert (await c.describe_run(run.run_id)).run.goal == "over mutual TLS"
        policy = railyard.RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.05)
        async with railyard.AsyncClient(
            url, tls_ca=tmp_path / "ca.pem", retry=policy, request_timeout=5
        ) as no_cert:
            # Refused in the handshake: grpc reports it as the server unreachable.
            with pytest.raises(railyard.Unavailable):
                await no_cert.list_workflows()
        async with railyard.AsyncClient(url, retry=policy, request_timeout=5) as untrusted:
            with pytest.raises(railyard.Unavailable):
                await untrusted.list_workflows()
        with pytest.raises(railyard.ConfigurationError, match="go together"):
            railyard.AsyncClient(url, tls_cert=tmp_path / "client.pem")
        with pytest.raises(railyard.ConfigurationError, match="no PEM block"):
            railyard.AsyncClient(url, tls_ca=tmp_path / "ext.cnf")
    finally:
        server.stop()
