"""The phone's private key in a file: PKCS#8 PEM, readable by its owner only."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from tapgate.domain.approvals import PrivateKey
from tapgate.domain.keys import KeyAlgorithm, canonical_public_key

__all__ = [
    "KeyFileError",
    "algorithm_of",
    "generate_key",
    "public_key_base64",
    "read_key",
    "write_key",
    "write_private",
]


class KeyFileError(Exception):
    """A key file that cannot be written or read; the message says what to change."""


def generate_key(alg: KeyAlgorithm) -> PrivateKey:
    if alg is KeyAlgorithm.ED25519:
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(ec.SECP256R1())


def algorithm_of(key: PrivateKey) -> KeyAlgorithm:
    return KeyAlgorithm.ED25519 if isinstance(key, ed25519.Ed25519PrivateKey) else KeyAlgorithm.P256


def public_key_base64(key: PrivateKey) -> str:
    """Base64 of the public key's SubjectPublicKeyInfo: the form enrolment and pairing send."""
    return canonical_public_key(key.public_key())


def write_key(path: Path, key: PrivateKey, force: bool = False) -> None:
    """Write ``key`` as PKCS#8 PEM, mode 0600. Raises KeyFileError if ``path`` exists and not ``force``."""
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_private(path, pem, force)


def write_private(path: Path, data: bytes, force: bool) -> None:
    """Write ``data`` to ``path`` readable and writable by its owner only (0600), never more widely even
    for an instant. Raises KeyFileError if it exists and not ``force``, or cannot be written."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise KeyFileError(f"{path} exists; pass --force to overwrite it, or choose another file.") from None
    except OSError as e:
        raise KeyFileError(f"{path} cannot be written: {e.strerror}.") from None
    try:
        os.fchmod(fd, 0o600)  # an existing file keeps its old mode on O_TRUNC
        os.write(fd, data)
    finally:
        os.close(fd)


def read_key(path: Path) -> PrivateKey:
    """The private key in ``path`` (unencrypted PKCS#8 or traditional PEM, P-256 or Ed25519).

    Raises KeyFileError naming the file and what is wrong."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise KeyFileError(f"The key file {path} cannot be read: {e.strerror}.") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise KeyFileError(
            f"{path} is not an unencrypted PEM private key; make one with 'tapgate device keygen'."
        ) from None
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return key
    raise KeyFileError(f"{path} holds a key tapgate cannot use; it needs a P-256 or Ed25519 key.")
