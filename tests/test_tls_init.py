"""`tapgate tls init`: a local certificate authority and a server certificate for this machine's names,
written into the settings; and the plain-HTTP side of `serve` with it, the /tls page a phone opens first."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import signal
import socket
import ssl
import stat
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tapgate.config import load_settings
from tests.live import Server, free_port, local_ca_gateway, tapgate, write_config


def _init(folder: Path) -> Path:
    made = tapgate("init", "--dir", str(folder))
    assert made.returncode == 0, made.stderr
    return folder / "tapgate.toml"


def _chain(folder: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates((folder / "tls" / "server.pem").read_bytes())


def test_tls_init_makes_a_local_ca_and_a_certificate_for_the_names_and_writes_the_settings(
    tmp_path: Path,
) -> None:
    config = _init(tmp_path)
    issued = tapgate("tls", "init", "--config", str(config), "--name", "gw.test", "--name", "192.168.1.20")
    assert issued.returncode == 0, issued.stderr
    tls = tmp_path / "tls"
    # The private keys are the owner's alone.
    for key in ("ca-key.pem", "server-key.pem"):
        assert stat.S_IMODE((tls / key).stat().st_mode) == 0o600
    server, ca = _chain(tmp_path)
    assert ca.public_bytes(serialization.Encoding.PEM) == (tls / "ca.pem").read_bytes()
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    usage = ca.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.key_cert_sign and usage.crl_sign
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["gw.test"]
    assert [str(a) for a in names.get_values_for_type(x509.IPAddress)] == ["192.168.1.20"]
    eku = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert server.not_valid_after_utc - server.not_valid_before_utc <= dt.timedelta(days=397, minutes=5)
    server.verify_directly_issued_by(ca)
    # The settings: https by the name (never the address), top-level keys above every table.
    settings = load_settings(str(config))
    assert settings.public_url == "https://gw.test:8443"
    assert Path(settings.tls_cert) == tls / "server.pem" and Path(settings.tls_key) == tls / "server-key.pem"
    text = config.read_text()
    first_table = text.index("\n[")
    assert text.index('tls_cert = "tls/server.pem"') < first_table
    assert text.index('public_url = "https://gw.test:8443"') < first_table
    assert "public_url = https://gw.test:8443" in issued.stdout.replace('"', "")


def test_tls_init_again_keeps_the_ca_and_issues_a_new_certificate_and_force_makes_a_new_ca(
    tmp_path: Path,
) -> None:
    config = _init(tmp_path)
    assert tapgate("tls", "init", "--config", str(config), "--name", "gw.test").returncode == 0
    first_server, first_ca = _chain(tmp_path)
    again = tapgate(
        "tls", "init", "--config", str(config), "--name", "gw.test", "--name", "tapgate.lan", "--port", "9443"
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("Kept the certificate authority")
    second_server, second_ca = _chain(tmp_path)
    assert second_ca == first_ca and second_server.serial_number != first_server.serial_number
    assert second_server.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName) == ["gw.test", "tapgate.lan"]
    assert load_settings(str(config)).public_url == "https://gw.test:9443"
    assert config.read_text().count("\npublic_url =") == 1  # replaced, not added twice
    forced = tapgate("tls", "init", "--config", str(config), "--name", "gw.test", "--force")
    assert forced.returncode == 0 and forced.stdout.startswith("Made a new certificate authority")
    assert _chain(tmp_path)[1] != first_ca


def test_tls_init_refuses_addresses_alone_because_passkeys_need_a_name(tmp_path: Path) -> None:
    config = _init(tmp_path)
    before = config.read_text()
    refused = tapgate("tls", "init", "--config", str(config), "--name", "192.168.1.20")
    assert refused.returncode == 1
    assert "browsers make passkeys only for a name" in refused.stderr
    assert config.read_text() == before and not (tmp_path / "tls").exists()


def test_tls_init_names_this_machine_by_default(tmp_path: Path) -> None:
    config = _init(tmp_path)
    assert tapgate("tls", "init", "--config", str(config)).returncode == 0
    host = socket.gethostname().split(".")[0].lower()
    [server, _] = _chain(tmp_path)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName)[:2] == [f"{host}.local", host]
    assert load_settings(str(config)).public_url == f"https://{host}.local:8443"


def test_tls_init_without_settings_says_to_run_init_first(tmp_path: Path) -> None:
    refused = tapgate("tls", "init", "--config", str(tmp_path / "none.toml"))
    assert refused.returncode == 1 and "run 'tapgate init' first" in refused.stderr


def test_serve_answers_plain_http_with_the_tls_page_and_the_ca_and_redirects_the_rest_to_https(
    tmp_path: Path,
) -> None:
    server, _ = local_ca_gateway(tmp_path, "localhost", "127.0.0.1")
    http_port = int(server.env["TAPGATE_HTTP_PORT"])
    plain = f"http://127.0.0.1:{http_port}"
    ca = x509.load_pem_x509_certificate((tmp_path / "tls" / "ca.pem").read_bytes())
    server.start()
    try:
        with httpx.Client(base_url=plain, timeout=10) as client:
            page = client.get("/tls")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            for words in (
                "Download the certificate",
                "iPhone and iPad",
                "Android",
                "<svg",
                f"https://localhost:{server.port}/app/",
            ):
                assert words in page.text
            fingerprint = hashlib.sha256(ca.public_bytes(serialization.Encoding.DER)).hexdigest().upper()
            assert " ".join(fingerprint[i : i + 2] for i in range(0, 64, 2)) in page.text
            # the authority by the name phones list it under, in the steps that say where to tap it
            [common_name] = ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
            assert page.text.count(f"<b>{common_name.value}</b>") >= 2 and "CN=" not in page.text
            der = client.get("/tls/ca.crt")
            assert der.headers["content-type"] == "application/x-x509-ca-cert"
            assert x509.load_der_x509_certificate(der.content) == ca
            assert x509.load_pem_x509_certificate(client.get("/tls/ca.pem").content) == ca
            for method in ("GET", "POST"):
                moved = client.request(method, "/v1/tools?session_id=s1")
                assert moved.status_code == 308
                assert moved.headers["location"] == f"https://localhost:{server.port}/v1/tools?session_id=s1"
        # The https side is the gateway, trusted with the CA.
        with httpx.Client(timeout=10, verify=ssl.create_default_context(cafile=str(server.ca))) as client:
            assert client.get(f"https://localhost:{server.port}/readyz").status_code == 200
        assert server.process is not None
        process = server.process
        server.stop()
        # uvicorn ends by raising the SIGTERM it caught again, once its shutdown is complete.
        assert process.returncode in (0, -signal.SIGTERM), server.logs()[-2000:]
        assert "Application shutdown complete" in server.logs()
        with pytest.raises(httpx.ConnectError), httpx.Client(base_url=plain, timeout=5) as client:
            client.get("/tls")
    finally:
        server.stop()


def test_serve_refuses_an_http_port_in_use_in_one_line(tmp_path: Path) -> None:
    server, _ = local_ca_gateway(tmp_path, "localhost")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = tapgate(
            "serve",
            "--config",
            str(server.config),
            "--port",
            str(server.port),
            env={**os.environ, "TAPGATE_HTTP_PORT": str(port)},
        )
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"Port {port} on 127.0.0.1 (http_port, the plain-HTTP /tls page) is in use by another program; "
        "set http_port to another port, or to 0 to turn it off."
    )


def test_serve_says_passkeys_need_a_name_when_public_url_is_an_address_and_verification_is_required(
    tmp_path: Path,
) -> None:
    port = free_port()
    config = write_config(
        tmp_path,
        f"sqlite:///{tmp_path / 'tapgate.db'}",
        public_url=f"http://192.168.1.20:{port}",
        require_user_verification=True,
    )
    assert tapgate("migrate", "--config", str(config)).returncode == 0
    server = Server(config, port=port).start()
    try:
        assert "passkeys need a name: public_url is an IP address" in server.logs()
    finally:
        server.stop()
    named = write_config(
        tmp_path,
        f"sqlite:///{tmp_path / 'tapgate.db'}",
        public_url=f"http://gw.test:{port}",
        require_user_verification=True,
    )
    server = Server(named, port=port).start()
    try:
        assert "passkeys need a name" not in server.logs()
    finally:
        server.stop()
