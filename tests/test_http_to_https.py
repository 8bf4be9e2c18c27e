"""Plain ``http://`` sent to a gateway that answers only HTTPS: the terminal phone says so and gives the
https address, not a bare protocol error."""

from __future__ import annotations

from pathlib import Path

from tests.live import tapgate
from tests.test_tls import Https, https_gateway

__all__ = ["https_gateway"]  # the fixture, from the tls tests


def test_http_to_an_https_gateway_says_to_use_https(https_gateway: Https, tmp_path: Path) -> None:
    key = tmp_path / "phone.pem"
    assert tapgate("device", "keygen", str(key)).returncode == 0
    plain = https_gateway.url.replace("https://", "http://")
    link = f"{plain}/app/#pair=0123456789abcdef0123456789abcdef"
    r = tapgate("device", "pair", link, str(key), "ana-phone", "--state", str(tmp_path / "state.json"))
    assert r.returncode == 1
    assert f"answers HTTPS, not plain http: use {https_gateway.url}/v1/pair" in r.stderr, r.stderr
    assert "RemoteProtocolError" not in r.stderr


def test_tapgate_mcp_sent_plain_http_to_an_https_gateway_says_to_use_https(https_gateway: Https) -> None:
    plain = https_gateway.url.replace("https://", "http://")

    r = tapgate("mcp", "--url", plain, "--token", "tga_unused")

    assert r.returncode == 1
    assert f"answers HTTPS, not plain http: use {https_gateway.url}" in r.stderr, r.stderr
    assert "RemoteProtocolError" not in r.stderr and "Traceback" not in r.stderr
