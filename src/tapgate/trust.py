"""Which certificate authorities a client of a gateway trusts, and the one sentence for a gateway whose
certificate it does not: every command that talks to a gateway, and the Python client, use these."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

__all__ = [
    "CA_FILE_ENV",
    "UnreadableCaFile",
    "trust",
    "trust_from_environment",
    "untrusted",
    "untrusted_line",
]

CA_FILE_ENV = "TAPGATE_CA_FILE"


class UnreadableCaFile(Exception):
    """The CA file given cannot be read as PEM certificates."""


def trust(ca_file: str | Path | None) -> ssl.SSLContext | bool:
    """What https and wss are checked against: the system's CAs (``True``), or those and the
    certificates in ``ca_file``. Raises UnreadableCaFile with a sentence naming the file."""
    if ca_file is None or str(ca_file) == "":
        return True
    context = ssl.create_default_context()
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except (OSError, ssl.SSLError, ValueError) as e:
        reason = getattr(e, "strerror", None) or "not a PEM certificate"
        raise UnreadableCaFile(f"--ca-file {ca_file} cannot be read as a PEM certificate ({reason}).") from e
    return context


def trust_from_environment() -> ssl.SSLContext | bool:
    """``trust`` of the file named in TAPGATE_CA_FILE, if any. Raises UnreadableCaFile."""
    return trust(os.environ.get(CA_FILE_ENV) or None)


def untrusted(error: BaseException) -> str | None:
    """The sentence for a failure caused by a gateway certificate this client does not trust, or None
    when ``error`` is something else (a refused connection, a timeout…)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            reason = current.verify_message or current.reason or "certificate verify failed"
            return (
                f"the gateway's certificate is not trusted ({reason}): pass --ca-file with the CA that "
                f"signed it (or set {CA_FILE_ENV})"
            )
        if isinstance(current, BaseExceptionGroup) and current.exceptions:
            for inner in current.exceptions:
                found = untrusted(inner)
                if found:
                    return found
        current = current.__cause__ or current.__context__
    return None


def untrusted_line(error: BaseException) -> str | None:
    """``untrusted`` as a line of its own: a sentence that starts with a capital and ends with a period."""
    sentence = untrusted(error)
    return f"{sentence[0].upper()}{sentence[1:]}." if sentence else None
