"""Where ``tapgate serve`` listens, and the address people and devices are given for it."""

from __future__ import annotations

import errno
import ipaddress
import socket
from urllib.parse import urlsplit

DEFAULT_PUBLIC_URL = "http://127.0.0.1:8080"
_WILDCARDS = ("", "0.0.0.0", "::")  # noqa: S104 - names of the wildcard address, not a bind


def serve_url(host: str, port: int, tls: bool) -> str:
    """The URL a gateway listening on ``host:port`` is reached at: the host itself, or for a wildcard
    address this machine's name."""
    name = socket.gethostname() if host in _WILDCARDS else host
    if ":" in name:  # an IPv6 literal
        name = f"[{name}]"
    return f"{'https' if tls else 'http'}://{name}:{port}"


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def names_an_ip(url: str) -> bool:
    """True when the URL's host is an IP address, where browsers make no passkey (they need a name)."""
    try:
        ipaddress.ip_address(urlsplit(url).hostname or "")
    except ValueError:
        return False
    return True


def needs_https_warning(public_url: str) -> bool:
    """True when a phone's browser would refuse WebCrypto and Web Push at this address."""
    return urlsplit(public_url).scheme != "https" and not is_loopback(public_url)


def port_in_use(host: str, port: int) -> bool:
    """True when nothing could listen on ``host:port`` now (uvicorn binds the same way, SO_REUSEADDR)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return True
            raise
    return False
