"""Proofs end to end: a proof fetched from a real `tapgate serve` verifies with `tapgate proof verify` (no
database: the keys come from the issuer's JWKS URL or a file) and with a verifier that imports nothing
of tapgate; a changed byte, a JWKS without the key, a cut disclosure or a file that is no proof fail with
a reason and exit 1, never a traceback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tapgate.adapters.store.migrate import migrate
from tapgate.cli import app
from tests import independent_verifier
from tests.live import Server, free_port, local_ca_gateway, new_tenant, tapgate, write_config
from tests.test_ca_file import without_ca_file
from tests.test_mandates_processes import LAMP_TOOL, _call, _home
from tests.world import bearer


@pytest.fixture(scope="module")
def fetched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A live gateway, a call made under a signed mandate, its proof and the JWKS, both in files."""
    folder = tmp_path_factory.mktemp("proofs")
    url = f"sqlite:///{folder / 'tapgate.db'}"
    port = free_port()
    server = Server(write_config(folder, url, public_url=f"http://127.0.0.1:{port}"), port=port)

    async def setup() -> dict[str, Any]:
        await migrate(url)
        server.start()
        operator = await new_tenant(url, "proofs")
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            tokens = await _home(client, operator, max_calls=1)
            call = await _call(client, tokens["agent"])
            assert call["mandate_id"] == tokens["mandate"]
            r = await client.get(f"/v1/invocations/{call['id']}/proof", headers=bearer(tokens["user"]))
            assert r.status_code == 200, r.text
            keys = (await client.get("/.well-known/jwks.json")).json()
        (folder / "call.sd-jwt").write_text(r.text)
        (folder / "jwks.json").write_text(json.dumps(keys))
        return {
            "server": server,
            "folder": folder,
            "proof": r.text,
            "jwks": keys,
            "call": call,
            "config": server.config,
        }

    try:
        yield asyncio.run(setup())
    finally:
        server.stop()


def _verify(*args: str) -> Any:
    return CliRunner().invoke(app, ["proof", "verify", *args])


def test_a_proof_from_a_live_gateway_verifies_with_the_command_line_and_an_independent_verifier(
    fetched: dict[str, Any],
) -> None:
    folder: Path = fetched["folder"]
    proof = str(folder / "call.sd-jwt")
    for extra in (
        [],
        ["--jwks", f"{fetched['server'].url}/.well-known/jwks.json"],
        ["--jwks", str(folder / "jwks.json")],
    ):
        done = tapgate("proof", "verify", proof, *extra)
        assert done.returncode == 0, done.stderr
        sentence = done.stdout.strip()
        assert sentence.startswith(f"default called {LAMP_TOOL} on desk-lamp, ")
        assert (
            f"under mandate {fetched['call']['mandate_id']}, which ana's device ana-phone approved"
            in sentence
        )
        assert sentence.endswith("all 1 argument disclosed")
    checked = independent_verifier.check(fetched["proof"], fetched["jwks"])
    assert checked["arguments"] == {"on": True} and checked["call"]["id"] == fetched["call"]["id"]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("not-a-proof", "Not an SD-JWT"),
        ("empty-jwks", "The JWKS has no key"),
        ("cut-disclosure", "Disclosure 1"),
        ("changed-signature", "The issuer's signature does not verify"),
    ],
)
def test_bad_input_fails_the_command_line_with_a_reason_and_no_traceback(
    fetched: dict[str, Any], tmp_path: Path, change: str, reason: str
) -> None:
    proof: str = fetched["proof"]
    jwks = fetched["folder"] / "jwks.json"
    if change == "not-a-proof":
        proof = "hello, this is a letter"
    elif change == "empty-jwks":
        jwks = tmp_path / "empty.json"
        jwks.write_text('{"keys": []}')
    elif change == "cut-disclosure":
        jwt, first, *_ = proof.split("~")
        proof = f"{jwt}~{first[:-4]}~"
    else:
        jwt = proof.split("~")[0]
        signature = jwt.rsplit(".", 1)[1]
        flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
        proof = proof.replace(signature, flipped)
    (tmp_path / "proof").write_text(proof)
    done = tapgate("proof", "verify", str(tmp_path / "proof"), "--jwks", str(jwks))
    assert done.returncode == 1
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith("The proof does not verify: ") and reason in done.stderr


def test_the_command_line_says_why_when_it_cannot_read_the_proof_or_the_keys(
    fetched: dict[str, Any], tmp_path: Path
) -> None:
    missing = _verify(str(tmp_path / "nothing.sd-jwt"))
    assert missing.exit_code == 1 and "Cannot read the proof" in missing.output
    (tmp_path / "bad.json").write_text("{")
    bad = _verify(str(fetched["folder"] / "call.sd-jwt"), "--jwks", str(tmp_path / "bad.json"))
    assert bad.exit_code == 1 and "is not JSON" in bad.output
    gone = _verify(
        str(fetched["folder"] / "call.sd-jwt"), "--jwks", f"http://127.0.0.1:{free_port()}/jwks.json"
    )
    assert gone.exit_code == 1 and "Cannot fetch the JWKS" in gone.output and "Traceback" not in gone.output


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.data())
def test_any_changed_byte_of_a_live_proof_fails_the_command_line_and_the_independent_verifier(
    fetched: dict[str, Any], tmp_path: Path, data: st.DataObject
) -> None:
    proof: str = fetched["proof"]
    at = data.draw(st.integers(0, len(proof) - 1))
    byte = data.draw(st.sampled_from("AQgw09-_.~xZ"))
    if proof[at] == byte:
        return
    changed = proof[:at] + byte + proof[at + 1 :]
    path = tmp_path / f"changed-{at}.sd-jwt"
    path.write_text(changed)
    done = _verify(str(path), "--jwks", str(fetched["folder"] / "jwks.json"))
    assert done.exit_code == 1, done.output
    assert "The proof does not verify: " in done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    with pytest.raises((independent_verifier.Refused, ValueError, KeyError, TypeError, AttributeError)):
        independent_verifier.check(changed, fetched["jwks"])


def test_after_tapgate_issuer_rotate_the_old_proof_still_verifies_against_the_published_keys(
    fetched: dict[str, Any],
) -> None:
    config = str(fetched["config"])
    rotated = tapgate("issuer", "rotate", "--tenant", "proofs", "--config", config)
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.startswith("Tenant proofs signs proofs with key ")
    keys = httpx.get(f"{fetched['server'].url}/.well-known/jwks.json").json()["keys"]
    assert len(keys) == 2 and all("d" not in k for k in keys)
    done = tapgate("proof", "verify", str(fetched["folder"] / "call.sd-jwt"))
    assert done.returncode == 0, done.stderr
    unknown = tapgate("issuer", "rotate", "--tenant", "nobody", "--config", config)
    assert unknown.returncode == 1 and unknown.stderr.strip() == "There is no tenant 'nobody'."


def test_a_proof_from_an_https_gateway_verifies_with_its_ca_file_and_says_why_without_it(
    tmp_path: Path,
) -> None:
    server, operator = local_ca_gateway(tmp_path, "localhost", "127.0.0.1")
    server.start()
    try:

        async def fetch() -> str:
            async with httpx.AsyncClient(base_url=server.url, timeout=30, verify=server.verify) as client:
                tokens = await _home(client, operator, max_calls=1)
                call = await _call(client, tokens["agent"])
                r = await client.get(f"/v1/invocations/{call['id']}/proof", headers=bearer(tokens["user"]))
                assert r.status_code == 200, r.text
                return r.text

        path = tmp_path / "call.sd-jwt"
        path.write_text(asyncio.run(fetch()))
        env = without_ca_file()
        trusted = tapgate("proof", "verify", str(path), "--ca-file", str(server.ca), env=env)
        assert trusted.returncode == 0, trusted.stderr
        assert "under mandate" in trusted.stdout
        untrusted = tapgate("proof", "verify", str(path), env=env)
        assert untrusted.returncode == 1 and "Traceback" not in untrusted.stderr
        assert untrusted.stderr.startswith("The gateway's certificate is not trusted (")
    finally:
        server.stop()
