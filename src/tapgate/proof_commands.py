"""Proofs on the command line: ``tapgate proof verify`` checks one offline, with no database, and
``tapgate issuer rotate`` gives a tenant a new issuer key (its older keys stay published)."""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from tapgate.device.cli import CaFileOption
from tapgate.domain.errors import ProofRefused
from tapgate.domain.proofs import verify
from tapgate.operator_commands import ConfigOption, TenantOption, _with_gateway

__all__ = ["issuer_app", "proof_app"]

JWKS_PATH = "/.well-known/jwks.json"

proof_app = typer.Typer(
    help="Proofs of approvals, mandates and calls: check one offline.", no_args_is_help=True
)
issuer_app = typer.Typer(help="The keys that sign a tenant's proofs.", no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(1)


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _fail(f"Cannot read the {what} {path}: {getattr(e, 'strerror', None) or e}.") from None


def _issuer(proof: str) -> str:
    """The ``iss`` the proof claims, read without checking anything yet (only to find its JWKS)."""
    try:
        body = proof.strip().split("~")[0].split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        issuer = claims["iss"]
    except (IndexError, KeyError, TypeError, ValueError, binascii.Error):
        raise _fail(
            "The proof does not verify: it is not an SD-JWT with an issuer (iss) to fetch the keys from."
        ) from None
    if not isinstance(issuer, str) or not issuer.startswith(("http://", "https://")):
        raise _fail("The proof does not verify: its issuer (iss) is not an http(s) address.")
    return issuer.rstrip("/") + JWKS_PATH


def _fetch(url: str, ca_file: Path | None) -> str:
    import httpx

    from tapgate.trust import UnreadableCaFile, trust, untrusted_line

    try:
        verify_tls = trust(ca_file)
    except UnreadableCaFile as e:
        raise _fail(str(e)) from None
    try:
        r = httpx.get(url, timeout=10, verify=verify_tls, follow_redirects=False)
    except httpx.TransportError as e:
        raise _fail(untrusted_line(e) or f"Cannot fetch the JWKS from {url} ({type(e).__name__}).") from None
    if r.status_code != 200:
        raise _fail(f"Cannot fetch the JWKS from {url}: the server answered {r.status_code}.")
    return r.text


def _jwks(text: str, source: str) -> dict[str, Any]:
    try:
        keys = json.loads(text)
    except ValueError:
        raise _fail(f"The JWKS from {source} is not JSON.") from None
    if not isinstance(keys, dict):
        raise _fail(f"The JWKS from {source} is not a JSON object with a 'keys' list.")
    return keys


@proof_app.command("verify")
def proof_verify(
    file: Annotated[Path, typer.Argument(help="The proof: a file holding the SD-JWT the gateway gave.")],
    jwks: Annotated[
        str | None,
        typer.Option(
            "--jwks",
            help="The issuer's public keys: a JWKS file, or its URL (default: the proof's issuer's "
            "/.well-known/jwks.json).",
        ),
    ] = None,
    ca_file: CaFileOption = None,
) -> None:
    """Check a proof offline and say what it proves; exit 1 with the first check that fails."""
    proof = _read(file, "proof")
    source = jwks or _issuer(proof)
    if source.startswith(("http://", "https://")):
        text = _fetch(source, ca_file)
    else:
        text = _read(Path(source), "JWKS file")
    try:
        proven = verify(proof, _jwks(text, source))
    except ProofRefused as e:
        raise _fail(f"The proof does not verify: {e.message}") from None
    typer.echo(proven.sentence)


@issuer_app.command("rotate")
def issuer_rotate(tenant: TenantOption = "default", config: ConfigOption = None) -> None:
    """Give the tenant a new issuer key: it signs every proof from now on; older keys stay published."""
    kid = _with_gateway(config, lambda g: g.rotate_issuer_key(tenant))
    typer.echo(
        f"Tenant {tenant} signs proofs with key {kid} from now on; its older keys stay published at "
        f"{JWKS_PATH}, so proofs they signed still verify."
    )
