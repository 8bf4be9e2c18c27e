"""`tapgate serve --tls-cert --tls-key`: https for agents, wss for the terminal phone, with a self-signed
certificate the clients are told to trust."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tapgate.client import Client
from tests.live import READY_SECONDS, free_port, tapgate
from tests.test_terminal_phone import RunningPhone
from tests.world import bearer


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key: (certificate, key) PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tapgate test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


@dataclass
class Https:
    url: str
    ca: Path
    operator: str
    folder: Path

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, timeout=10, verify=ssl.create_default_context(cafile=str(self.ca))
        )


@pytest.fixture
def https_gateway(tmp_path: Path) -> Iterator[Https]:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    cert, key = self_signed(tmp_path)
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "tapgate", "serve", "--config", str(tmp_path / "tapgate.toml")]
    with log.open("w") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key)],
            stdout=subprocess.DEVNULL,
            stderr=out,
            env=os.environ | {"PYTHONUNBUFFERED": "1", "TAPGATE_HTTP_PORT": "0"},
        )
    gateway = Https(f"https://127.0.0.1:{port}", cert, made.stdout.strip().splitlines()[-1], tmp_path)
    try:
        deadline = time.monotonic() + READY_SECONDS
        with gateway.client() as client:
            while True:
                assert process.poll() is None, log.read_text()
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/readyz").status_code == 200:
                        break
                assert time.monotonic() < deadline, "the https gateway did not become ready"
                time.sleep(0.05)
        yield gateway
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def _ana(gateway: Https) -> str:
    """ana and her agent token."""
    with gateway.client() as client:
        assert client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(gateway.operator)).is_success
        r = client.post("/v1/users/ana/tokens", json={"kind": "agent"}, headers=bearer(gateway.operator))
        return str(r.json()["token"])


async def test_the_python_client_speaks_https_to_a_gateway_it_is_told_to_trust(https_gateway: Https) -> None:
    agent = _ana(https_gateway)
    async with Client(https_gateway.url, agent, verify=str(https_gateway.ca)) as tapgate_client:
        assert await tapgate_client.tools() == []
    async with Client(https_gateway.url, agent) as untrusting:
        with pytest.raises(httpx.ConnectError, match="certificate is not trusted"):
            await untrusting.tools()


async def test_the_terminal_phone_pairs_over_https_and_answers_over_wss(https_gateway: Https) -> None:
    agent = _ana(https_gateway)
    folder, ca = https_gateway.folder, str(https_gateway.ca)
    with https_gateway.client() as client:
        started = client.post("/v1/users/ana/pairings", headers=bearer(https_gateway.operator)).json()
    # The link names the https address serve listens on.
    assert started["url"].startswith(f"{https_gateway.url}/app/#pair=")
    assert tapgate("device", "keygen", str(folder / "lamp.pem")).returncode == 0
    state = folder / "lamp.json"
    lamp = (
        '{"name": "set_light", "kind": "actuator", "params": {"on": {"type": "boolean", "required": true}}}'
    )
    pair_args = [started["url"], str(folder / "lamp.pem"), "desk-lamp", "--kind", "lamp"]
    pair_args += ["--capability", lamp, "--state", str(state)]
    refused = tapgate("device", "pair", *pair_args)
    assert refused.returncode == 1 and "certificate is not trusted" in refused.stderr
    paired = tapgate("device", "pair", *pair_args, "--ca-file", ca)
    assert paired.returncode == 0, paired.stderr
    code = paired.stdout.strip().splitlines()[-1].split()[-1]
    with https_gateway.client() as client:
        consent = {"comparison_code": code, "approved": True, "grants": ["set_light"]}
        r = client.post(
            f"/v1/pairings/{started['pairing_id']}/consent",
            json=consent,
            headers=bearer(https_gateway.operator),
        )
        assert r.status_code == 200, r.text
    phone = RunningPhone("--state", str(state), "--auto", "done", "--ca-file", ca)
    try:
        phone.expect("Connected over the WebSocket")
        async with Client(https_gateway.url, agent, verify=ca) as tapgate_client:
            call = await tapgate_client.invoke("device__desk_lamp__set_light", {"on": True}, wait=30)
        assert call.status == "done"
    finally:
        phone.kill()


def test_serve_refuses_a_certificate_and_key_that_do_not_load_in_one_line(tmp_path: Path) -> None:
    made = tapgate("init", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    config = str(tmp_path / "tapgate.toml")
    cert, key = self_signed(tmp_path)
    (tmp_path / "other.pem").write_text("not a key\n")
    refused = tapgate(
        "serve", "--config", config, "--tls-cert", str(cert), "--tls-key", str(tmp_path / "other.pem")
    )
    assert refused.returncode == 1
    other = tmp_path / "other.pem"
    said = f"{cert} and {other} are not a PEM certificate and its private key; check both files."
    assert refused.stderr.strip() == said
    missing = tapgate(
        "serve", "--config", config, "--tls-cert", str(tmp_path / "gone.pem"), "--tls-key", str(key)
    )
    assert missing.returncode == 1 and "cannot be read" in missing.stderr
    (tmp_path / "tapgate.toml").write_text(f'tls_cert = "{cert}"\n' + (tmp_path / "tapgate.toml").read_text())
    half = tapgate("serve", "--config", config)
    assert half.returncode == 1 and "tls_cert and tls_key go together" in half.stderr
