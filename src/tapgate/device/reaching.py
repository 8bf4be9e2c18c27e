"""Why the terminal phone could not reach a gateway, in words that say what to change."""

from __future__ import annotations

import socket
import ssl

import httpx

from tapgate.trust import untrusted_line

__all__ = ["unreachable", "unresolved"]

_PROBE_SECONDS = 3.0


def _speaks_tls(host: str, port: int) -> bool:
    """Whether something at ``host:port`` completes a TLS handshake (its certificate is not checked)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=_PROBE_SECONDS) as raw,
            context.wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


def _tls_failed(error: BaseException) -> bool:
    """Whether a TLS handshake failed for another reason than the certificate (the other end spoke
    something else)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLError) and not isinstance(current, ssl.SSLCertVerificationError):
            return True
        current = current.__cause__ or current.__context__
    return False


def _in_chain(error: BaseException, kind: type[BaseException]) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, kind):
            return True
        current = current.__cause__ or current.__context__
    return False


def unresolved(url: str) -> str:
    """What to tell the person when the host name in ``url`` does not resolve here: the gateway may well
    be running, so "start it" would mislead."""
    host = httpx.URL(url).host
    return (
        f"The name {host} does not resolve on this machine ({url}): check it, or make it resolve here too "
        "(a .local name through mDNS, another through your DNS or /etc/hosts)."
    )


def unreachable(url: str, error: Exception) -> str:
    """What to tell the person when a request to ``url`` failed with ``error``: an untrusted certificate
    says so and what to pass; a name that does not resolve says so; plain ``http://`` sent to a port that
    answers only HTTPS says so and gives the https address, and ``https://`` sent to a port that answers
    only plain http gives the http one."""
    line = untrusted_line(error)
    if line is not None:
        return line
    if _in_chain(error, socket.gaierror):
        return unresolved(url)
    parsed = httpx.URL(url)
    if (
        parsed.scheme == "http"
        # a TLS server shown plain http answers with an alert or closes (a reset when it left the request
        # unread): which one the client sees first depends on timing, so either sends it to the probe
        and isinstance(error, httpx.RemoteProtocolError | httpx.ReadError)
        and _speaks_tls(parsed.host, parsed.port or 80)
    ):
        https = parsed.copy_with(scheme="https")
        return (
            f"The gateway at {parsed.host}:{parsed.port or 80} answers HTTPS, not plain http: use {https} "
            "(with --ca-file if its certificate is your own)."
        )
    if parsed.scheme == "https" and _tls_failed(error) and not _speaks_tls(parsed.host, parsed.port or 443):
        plain = parsed.copy_with(scheme="http")
        return (
            f"The gateway at {parsed.host}:{parsed.port or 443} answers plain http, not HTTPS: use {plain}."
        )
    return f"The gateway at {url} cannot be reached ({type(error).__name__}); check the URL and that it runs."
