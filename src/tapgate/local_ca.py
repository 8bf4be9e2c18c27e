"""A local certificate authority for a gateway without a public name: the CA, and server certificates it
signs for the names phones reach the gateway at (``tapgate tls init``).

The files live in one folder beside the settings: ``ca.pem`` (what devices install), ``ca-key.pem`` (mode
0600; whoever holds it can make certificates every trusting device accepts), ``server.pem`` (the server
certificate followed by the CA's) and ``server-key.pem`` (mode 0600)."""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "LocalCaError", "ca_in_chain", "default_names", "issue", "split_names"]

CA_YEARS = 10
SERVER_DAYS = 397  # the most browsers accept for a server certificate
CA_FILE, CA_KEY_FILE = "ca.pem", "ca-key.pem"
SERVER_FILE, SERVER_KEY_FILE = "server.pem", "server-key.pem"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class LocalCaError(Exception):
    """The folder's CA cannot be read or the files cannot be written; the message says which."""


@dataclass(frozen=True)
class Issued:
    folder: Path
    new_ca: bool
    names: tuple[str, ...]
    addresses: tuple[str, ...]
    not_after: dt.datetime

    @property
    def ca(self) -> Path:
        return self.folder / CA_FILE

    @property
    def certificate(self) -> Path:
        return self.folder / SERVER_FILE

    @property
    def key(self) -> Path:
        return self.folder / SERVER_KEY_FILE


def default_names() -> list[str]:
    """This machine's host name, ``<host>.local`` (what phones on the LAN resolve by mDNS) and its LAN
    addresses."""
    host = socket.gethostname().split(".")[0].lower()
    names = [f"{host}.local", host] if host else []
    return names + [str(a) for a in _lan_addresses()]


def _lan_addresses() -> list[Address]:
    found: list[Address] = []
    with contextlib.suppress(OSError):
        for info in socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP):
            found.append(ipaddress.ip_address(info[4][0]))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # a UDP "connection" sends nothing: it only picks the route's address
        found.append(ipaddress.ip_address(probe.getsockname()[0]))
    return sorted({a for a in found if not a.is_loopback and not a.is_link_local}, key=str)


def split_names(names: list[str]) -> tuple[list[str], list[Address]]:
    """The DNS names and the IP addresses among ``names``, in order, without repeats."""
    dns: list[str] = []
    addresses: list[Address] = []
    for raw in names:
        name = raw.strip().strip("[]").lower()
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            if name and name not in dns:
                dns.append(name)
            continue
        if address not in addresses:
            addresses.append(address)
    return dns, addresses


def issue(folder: Path, names: list[str], new_ca: bool, now: dt.datetime) -> Issued:
    """Make (or keep) the CA in ``folder`` and a new server certificate for ``names`` signed by it.
    Raises LocalCaError."""
    dns, addresses = split_names(names)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LocalCaError(f"{folder} cannot be made: {e.strerror}.") from e
    made_ca = new_ca or not (folder / CA_FILE).exists() or not (folder / CA_KEY_FILE).exists()
    if made_ca:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key, now)
        _write_private(folder / CA_KEY_FILE, ca_key)
        _write(folder / CA_FILE, ca_cert.public_bytes(serialization.Encoding.PEM))
    else:
        ca_cert, ca_key = _read_ca(folder)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _server_certificate(key, ca_cert, ca_key, dns, addresses, now)
    _write_private(folder / SERVER_KEY_FILE, key)
    pem = serialization.Encoding.PEM
    _write(folder / SERVER_FILE, cert.public_bytes(pem) + ca_cert.public_bytes(pem))
    return Issued(folder, made_ca, tuple(dns), tuple(str(a) for a in addresses), cert.not_valid_after_utc)


def ca_in_chain(chain_pem: bytes) -> x509.Certificate | None:
    """The self-signed certificate authority at the end of a PEM chain (as ``issue`` writes it), or None
    when the chain ends in a certificate a public authority issued."""
    try:
        chain = x509.load_pem_x509_certificates(chain_pem)
    except ValueError:
        return None
    last = chain[-1]
    try:
        constraints = last.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return None
    return last if constraints.ca and last.subject == last.issuer and len(chain) > 1 else None


def _ca_certificate(key: ec.EllipticCurvePrivateKey, now: dt.datetime) -> x509.Certificate:
    host = socket.gethostname().split(".")[0] or "this machine"
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"tapgate local CA ({host})")])
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365 * CA_YEARS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    dns: list[str],
    addresses: list[Address],
    now: dt.datetime,
) -> x509.Certificate:
    alternative: list[x509.GeneralName] = [x509.DNSName(n) for n in dns]
    alternative += [x509.IPAddress(a) for a in addresses]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0] if dns else str(addresses[0]))])
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=SERVER_DAYS))
        .add_extension(x509.SubjectAlternativeName(alternative), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )


def _read_ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate((folder / CA_FILE).read_bytes())
        key = serialization.load_pem_private_key((folder / CA_KEY_FILE).read_bytes(), password=None)
    except (OSError, ValueError) as e:
        raise LocalCaError(
            f"The CA in {folder} cannot be read ({getattr(e, 'strerror', None) or 'not PEM'}); pass --force "
            "to make a new one (every device must then install the new CA)."
        ) from e
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise LocalCaError(
            f"{folder / CA_KEY_FILE} is not the EC key 'tapgate tls init' makes; pass --force."
        )
    return cert, key


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as e:
        raise LocalCaError(f"{path} cannot be written: {e.strerror}.") from e


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    try:
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
    except OSError as e:
        raise LocalCaError(f"{path} cannot be written: {e.strerror}.") from e
