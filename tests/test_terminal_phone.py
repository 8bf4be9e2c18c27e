"""The terminal phone (`tapgate device …`) end to end against a real gateway, and its run loop in process.

The end-to-end tests run `tapgate serve` on SQLite and drive `tapgate device` as a person would: keygen,
pair by the pairing link, the person's consent over the HTTP API with the code the command printed, then
`run` as a subprocess answering an agent's calls and signing approvals. The in-process tests give the run
loop's core a failing WebSocket, a fake clock and a recording screen.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from rich.console import Console
from websockets.exceptions import ConnectionClosed

from tapgate.adapters.store.migrate import migrate
from tapgate.device.cards import Screen as CardScreen
from tapgate.device.examples import LAMP_MANIFEST
from tapgate.device.handlers import Handlers, load_handlers
from tapgate.device.keyfile import generate_key
from tapgate.device.manifest import device_body
from tapgate.device.phone import Answer, Backoff, Call, Ending, Link, Phone, Request, Verdict
from tapgate.device.state import StateError, parse_pairing_link
from tapgate.domain.approvals import Decision
from tapgate.domain.keys import KeyAlgorithm, canonical_public_key
from tapgate.domain.vectors import generate_vectors
from tests.conftest import blocking
from tests.live import Server, free_port, new_tenant, tapgate, write_config
from tests.world import THERMOMETER, bearer

TIMEOUT = 20  # seconds a call waits for its device on these gateways
LINE_SECONDS = 45.0  # the most a test waits for a line from `tapgate device run` (a busy machine: seconds)
VECTORS = Path(__file__).parent / "data" / "test-vectors.json"
SET_LIGHT = "set_light"


def _gateway(folder: Path) -> tuple[Server, str]:
    url = f"sqlite:///{folder / 'tapgate.db'}"
    blocking(migrate(url))
    port = free_port()
    config = write_config(
        folder,
        url,
        public_url=f"http://127.0.0.1:{port}",
        invocation_timeout_seconds=TIMEOUT,
        device_call_timeout_seconds=TIMEOUT,
    )
    return Server(config, port=port).start(), url


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    server, url = _gateway(tmp_path_factory.mktemp("phone-gateway"))
    try:
        yield server, url
    finally:
        server.kill()  # a graceful stop would wait out the long-polls the killed phones left open


@dataclass
class Person:
    """A fresh tenant on a live gateway: its operator, ana (user token) and her agent."""

    server: Server
    operator: str
    user: str
    agent: str
    folder: Path
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=self.server.url, timeout=TIMEOUT + 10)

    def invoke(self, capability: str, device: str = "ana-lamp", **body: Any) -> dict[str, Any]:
        tool = f"device__{device.replace('-', '_')}__{capability}"
        r = self.client.post("/v1/invocations", json={"tool": tool, **body}, headers=bearer(self.agent))
        assert r.status_code == 200, r.text
        return dict(r.json())

    def view(self, invocation_id: str, wait: float = 0) -> dict[str, Any]:
        r = self.client.get(f"/v1/invocations/{invocation_id}?wait={wait}", headers=bearer(self.agent))
        assert r.status_code == 200, r.text
        return dict(r.json())

    def inbox(self) -> list[dict[str, Any]]:
        r = self.client.get("/v1/inbox", headers=bearer(self.user))
        assert r.status_code == 200, r.text
        return list(r.json()["approvals"])

    def audit(self) -> list[dict[str, Any]]:
        r = self.client.get("/v1/audit?limit=1000", headers=bearer(self.operator))
        return list(r.json()["entries"])

    def revoke(self, device: str = "ana-lamp") -> None:
        r = self.client.delete(f"/v1/users/ana/devices/{device}", headers=bearer(self.user))
        assert r.status_code == 204, r.text

    def pair(
        self,
        device: str = "ana-lamp",
        manifest: list[dict[str, Any]] | None = None,
        grants: tuple[str, ...] = (SET_LIGHT, "unplug"),
        alg: str = "p256",
        kind: str = "lamp",
    ) -> Path:
        """keygen, `tapgate device pair` by the link, the person's consent with the printed code."""
        key = self.folder / f"{device}.pem"
        made = tapgate("device", "keygen", str(key), "--alg", alg)
        assert made.returncode == 0, made.stderr
        manifest_file = self.folder / f"{device}.json"
        manifest_file.write_text(json.dumps(LAMP_MANIFEST if manifest is None else manifest))
        r = self.client.post("/v1/users/ana/pairings", json={}, headers=bearer(self.user))
        assert r.status_code == 201, r.text
        pairing = r.json()
        state = self.folder / f"{device}-state.json"
        paired = tapgate(
            "device", "pair", pairing["url"], str(key), device, "--kind", kind,
            "--capability", f"@{manifest_file}", "--state", str(state),
        )  # fmt: skip
        assert paired.returncode == 0, paired.stderr
        code = re.fullmatch(r"comparison code: (\d{6})", paired.stdout.strip().splitlines()[-1])
        assert code is not None, paired.stdout
        assert code.group(1) in paired.stdout.split("comparison code:")[0]  # the panel shows it too
        r = self.client.post(
            f"/v1/pairings/{pairing['pairing_id']}/consent",
            json={"comparison_code": code.group(1), "approved": True, "grants": list(grants)},
            headers=bearer(self.user),
        )
        assert r.status_code == 200, r.text
        assert r.json()["device"]["status"] == "active"
        return state


def _person(server: Server, database_url: str, folder: Path) -> Person:
    operator = blocking(new_tenant(database_url))
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.post("/v1/users", json={"user_id": "ana"}, headers=bearer(operator)).status_code == 201
        tokens = [
            client.post("/v1/users/ana/tokens", json={"kind": kind}, headers=bearer(operator)).json()["token"]
            for kind in ("user", "agent")
        ]
    return Person(server, operator, tokens[0], tokens[1], folder)


@pytest.fixture
def person(gateway: tuple[Server, str], tmp_path: Path) -> Iterator[Person]:
    ana = _person(*gateway, tmp_path)
    try:
        yield ana
    finally:
        ana.client.close()


class RunningPhone:
    """`tapgate device run …` as a subprocess; its output read line by line on a thread."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tapgate", "device", "run", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.PIPE,
            text=True,
            # PYTHONFAULTHANDLER: a run that does not end is sent SIGABRT, and prints where each thread was.
            env=os.environ | {"PYTHONUNBUFFERED": "1", "COLUMNS": "200", "PYTHONFAULTHANDLER": "1"},
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def expect(self, pattern: str, seconds: float = LINE_SECONDS) -> re.Match[str]:
        """The first line from here on that matches ``pattern``; fails after ``seconds``."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            try:
                line = self._queue.get(timeout=max(0.01, left))
            except queue.Empty:
                line = ""
            if line is None:
                pytest.fail(f"run exited before {pattern!r}:\n" + "\n".join(self.lines) + self.stderr())
            if line:
                self.lines.append(line)
                found = re.search(pattern, line)
                if found:
                    return found
            if time.monotonic() > deadline:
                pytest.fail(f"no line matched {pattern!r} in {seconds} s:\n" + "\n".join(self.lines))

    def say(self, *lines: str) -> None:
        """Type ``lines`` at the phone's prompts."""
        assert self.process.stdin is not None
        self.process.stdin.write("".join(f"{line}\n" for line in lines))
        self.process.stdin.flush()

    def wait(self, seconds: float = LINE_SECONDS) -> int:
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(timeout=LINE_SECONDS)
            pytest.fail(f"run did not end in {seconds} s; where it was:\n" + self.stderr())

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def run_phone() -> Iterator[Callable[..., RunningPhone]]:
    started: list[RunningPhone] = []

    def start(*args: str) -> RunningPhone:
        phone = RunningPhone(*args)
        started.append(phone)
        return phone

    try:
        yield start
    finally:
        for phone in started:
            phone.kill()


def _lamp_phone(run_phone: Callable[..., RunningPhone], state: Path, *extra: str) -> RunningPhone:
    phone = run_phone(
        "--state", str(state), "--auto", "done", "--handlers", "tapgate.device.examples", *extra
    )
    phone.expect("Connected over the WebSocket")
    return phone


# keygen and enrol


@pytest.mark.parametrize("alg", ["p256", "ed25519"])
def test_keygen_writes_an_owner_only_pkcs8_key_and_prints_its_public_key_last(
    tmp_path: Path, alg: str
) -> None:
    key_file = tmp_path / "phone.pem"
    made = tapgate("device", "keygen", str(key_file), "--alg", alg)
    assert made.returncode == 0, made.stderr
    assert oct(key_file.stat().st_mode)[-3:] == "600"
    pem = key_file.read_bytes()
    assert pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    key = serialization.load_pem_private_key(pem, password=None)
    public = made.stdout.strip().splitlines()[-1]
    assert public == canonical_public_key(key.public_key())

    again = tapgate("device", "keygen", str(key_file), "--alg", alg)
    assert again.returncode == 1
    assert "--force" in again.stderr
    assert key_file.read_bytes() == pem
    forced = tapgate("device", "keygen", str(key_file), "--alg", alg, "--force")
    assert forced.returncode == 0
    assert key_file.read_bytes() != pem
    assert oct(key_file.stat().st_mode)[-3:] == "600"


def test_enrol_prints_the_body_or_posts_it_and_prints_a_working_device_token(person: Person) -> None:
    key_file = person.folder / "lamp.pem"
    public = tapgate("device", "keygen", str(key_file)).stdout.strip().splitlines()[-1]
    capability = json.dumps(LAMP_MANIFEST[0])
    printed = tapgate(
        "device", "enrol", str(key_file), "desk-lamp", "--kind", "lamp", "--capability", capability,
        "--push-kind", "fcm", "--push-token", "T", "--grant", SET_LIGHT,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    body = json.loads(printed.stdout)
    assert body == {
        "device_id": "desk-lamp",
        "name": "Desk lamp",
        "kind": "lamp",
        "alg": "p256",
        "public_key": public,
        "capabilities": [LAMP_MANIFEST[0]],
        "push": {"kind": "fcm", "token": "T"},
        "grants": [SET_LIGHT],
    }

    half = tapgate("device", "enrol", str(key_file), "desk-lamp", "--url", person.server.url)
    assert half.returncode == 2

    state = person.folder / "state.json"
    posted = tapgate(
        "device", "enrol", str(key_file), "desk-lamp", "--kind", "lamp", "--capability", capability,
        "--grant", SET_LIGHT, "--url", person.server.url, "--user", "ana",
        "--operator-token", person.operator, "--state", str(state),
    )  # fmt: skip
    assert posted.returncode == 0, posted.stderr
    token = posted.stdout.strip().splitlines()[-1]
    r = person.client.get("/v1/device/invocations", headers=bearer(token))
    assert r.status_code == 200, r.text
    assert json.loads(state.read_text())["token"] == token
    assert oct(state.stat().st_mode)[-3:] == "600"
    again = tapgate(
        "device", "enrol", str(key_file), "desk-lamp", "--url", person.server.url, "--user", "ana",
        "--operator-token", person.operator,
    )  # fmt: skip
    assert again.returncode == 1
    assert "refused the enrolment" in again.stderr


# pair and run


def test_a_phone_paired_by_its_link_answers_an_agents_call_and_a_failing_handler_does_not_stop_it(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    saved = json.loads(state.read_text())
    assert saved["gateway_url"] == person.server.url
    assert saved["device_id"] == "ana-lamp"
    assert oct(state.stat().st_mode)[-3:] == "600"
    phone = _lamp_phone(run_phone, state)

    on = person.invoke(SET_LIGHT, arguments={"on": True, "brightness": 40}, wait=TIMEOUT)
    assert on["status"] == "done", on
    assert on["result"]["message"] == "the lamp is on at 40%"
    phone.expect(rf"answered {on['id']} done: the lamp is on at 40%")

    too_bright = person.invoke(SET_LIGHT, arguments={"on": True, "brightness": 140}, wait=TIMEOUT)
    assert too_bright["status"] == "failed", too_bright
    assert too_bright["result"]["message"] == "brightness must be between 0 and 100, not 140"
    assert too_bright["result"]["text"] == "device error: brightness must be between 0 and 100, not 140"
    phone.expect(rf"answered {too_bright['id']} failed")
    assert not any("Traceback" in line for line in phone.lines)

    off = person.invoke(SET_LIGHT, arguments={"on": False}, wait=TIMEOUT)  # the loop went on
    assert off["status"] == "done", off
    assert off["result"]["message"] == "the lamp is off"


def test_a_call_without_a_handler_is_simulated_and_says_so(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair(manifest=[THERMOMETER], grants=("read_temperature",))
    phone = run_phone("--state", str(state), "--auto", "done")
    phone.expect("Connected over the WebSocket")
    call = person.invoke("read_temperature", arguments={}, wait=TIMEOUT)
    assert call["status"] == "done"
    assert call["result"]["message"] == "simulated: this terminal phone has no handler for read_temperature"


def test_run_asks_the_person_and_does_what_they_answer(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    phone = run_phone("--state", str(state), "--handlers", "tapgate.device.examples")
    phone.expect("Connected over the WebSocket")

    call = person.invoke(SET_LIGHT, arguments={"on": True, "brightness": 70})
    phone.expect(rf"Call {call['id']}")
    phone.say("maybe", "y")  # an answer that is not one is asked again
    assert person.view(call["id"], wait=TIMEOUT)["result"]["message"] == "the lamp is on at 70%"

    failed = person.invoke(SET_LIGHT, arguments={"on": True})
    phone.expect(rf"Call {failed['id']}")
    phone.say("f")
    view = person.view(failed["id"], wait=TIMEOUT)
    assert view["status"] == "failed"
    assert view["result"]["message"] == "the person marked it failed on the device"

    asked = person.invoke("unplug", arguments={})
    approval = phone.expect(r"Approval (apr_\w+)").group(1)
    phone.say("d", "Not while I'm away")
    view = person.view(asked["id"], wait=TIMEOUT)
    assert view["status"] == "refused"
    assert view["reason"] == "[policy] the person declined this call: Not while I'm away"
    phone.expect(rf"decided {approval} denied \(signed by ana-lamp\)")


def test_run_auto_declined_declines_without_carrying_out(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    phone = run_phone("--state", str(state), "--auto", "declined", "--handlers", "tapgate.device.examples")
    phone.expect("Connected over the WebSocket")
    call = person.invoke(SET_LIGHT, arguments={"on": True, "brightness": 140}, wait=TIMEOUT)
    assert call["status"] == "declined"  # not failed: the failing handler never ran
    assert call["result"]["message"] is None


def test_run_signs_an_approval_and_the_call_goes_on_to_be_answered(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    phone = _lamp_phone(run_phone, state, "--approve", "auto-approve")
    call = person.invoke("unplug", arguments={}, wait=TIMEOUT)  # unplug is confirm: true
    assert call["status"] == "done", call
    assert call["result"]["message"] == "the lamp is unplugged"
    assert re.fullmatch(r"[A-Z0-9]{4}", call["binding_code"])
    phone.expect(rf"binding code\s+{call['binding_code']}")  # the card shows the agent's code
    decided = phone.expect(r"decided (apr_\w+) approved \(signed by ana-lamp\)")
    [entry] = [e for e in person.audit() if e["action"] == "approval.decided"]
    assert entry["subject"] == decided.group(1)
    assert entry["data"]["decided_by"] == "device:ana-lamp"  # verified against the paired key


def test_run_auto_deny_refuses_the_call_with_a_signed_denial(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    _lamp_phone(run_phone, state, "--approve", "auto-deny")
    call = person.invoke("unplug", arguments={}, wait=TIMEOUT)
    assert call["status"] == "refused", call
    assert call["reason"] == "[policy] the person declined this call"


def test_decide_signs_an_inbox_item_from_the_terminal(person: Person) -> None:
    state = person.pair()
    call = person.invoke("unplug", arguments={})
    assert call["status"] == "awaiting_approval"
    [approval] = person.inbox()

    wrong = tapgate("device", "decide", "--state", str(state), approval["id"], "maybe")
    assert wrong.returncode == 2
    unknown = tapgate("device", "decide", "--state", str(state), "apr_" + "0" * 32, "approved")
    assert unknown.returncode == 1
    assert "no pending approval" in unknown.stderr

    decided = tapgate(
        "device", "decide", "--state", str(state), approval["id"], "denied", "--message", "not now"
    )
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.strip() == f"approval {approval['id']}: denied (signed by ana-lamp)"
    view = person.view(call["id"])
    assert view["status"] == "refused"
    assert view["reason"] == "[policy] the person declined this call: not now"
    [entry] = [e for e in person.audit() if e["action"] == "approval.decided"]
    assert entry["data"]["decided_by"] == "device:ana-lamp"


def test_decide_not_me_denies_and_pauses_the_agent(person: Person) -> None:
    state = person.pair()
    call = person.invoke("unplug", arguments={})
    [approval] = person.inbox()
    usage = tapgate("device", "decide", "--state", str(state), approval["id"], "approved", "--not-me")
    assert usage.returncode == 2
    decided = tapgate("device", "decide", "--state", str(state), approval["id"], "denied", "--not-me")
    assert decided.returncode == 0, decided.stderr
    assert person.view(call["id"])["status"] == "refused"
    assert [e for e in person.audit() if e["action"] == "agent.paused"]


def test_decide_offline_prints_a_body_the_gateway_accepts(person: Person) -> None:
    state = person.pair()
    call = person.invoke("unplug", arguments={})
    [approval] = person.inbox()
    saved = person.folder / "approval.json"
    saved.write_text(json.dumps(approval))
    key_file = json.loads(state.read_text())["key_file"]
    printed = tapgate(
        "device", "decide", "--key", key_file, "--device-id", "ana-lamp", "--approval", str(saved), "approved"
    )
    assert printed.returncode == 0, printed.stderr
    body = json.loads(printed.stdout)
    assert body["decision"] == "approved"
    assert body["device_id"] == "ana-lamp"
    r = person.client.post(f"/v1/approvals/{approval['id']}", json=body, headers=bearer(person.user))
    assert r.json() == {"id": approval["id"], "status": "approved"}, r.text
    assert person.view(call["id"])["status"] == "pending"  # approved: on its way to the lamp


def test_revoking_the_device_stops_run_with_exit_1_and_says_why(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    phone = _lamp_phone(run_phone, state)
    person.revoke()
    assert phone.wait() == 1
    said = phone.stderr()
    assert "Pair it again" in said
    assert "removed" in said
    assert "Traceback" not in said


def test_ctrl_c_stops_run_cleanly_with_exit_0(person: Person, run_phone: Callable[..., RunningPhone]) -> None:
    state = person.pair()
    phone = _lamp_phone(run_phone, state)
    phone.process.send_signal(signal.SIGINT)
    assert phone.wait(30) == 0  # a loaded machine may take a while to wind the link down
    phone.expect("Stopped.")
    assert "Traceback" not in phone.stderr()


def test_run_waits_for_the_persons_consent_then_serves(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    key = person.folder / "late.pem"
    assert tapgate("device", "keygen", str(key)).returncode == 0
    manifest = person.folder / "lamp.json"
    manifest.write_text(json.dumps(LAMP_MANIFEST))
    pairing = person.client.post("/v1/users/ana/pairings", json={}, headers=bearer(person.user)).json()
    state = person.folder / "late-state.json"
    paired = tapgate(
        "device", "pair", pairing["url"], str(key), "ana-lamp", "--capability", f"@{manifest}",
        "--state", str(state),
    )  # fmt: skip
    code = paired.stdout.strip().splitlines()[-1].split()[-1]
    phone = run_phone("--state", str(state), "--auto", "done", "--handlers", "tapgate.device.examples")
    phone.expect("Waiting for the person to confirm the pairing")
    r = person.client.post(
        f"/v1/pairings/{pairing['pairing_id']}/consent",
        json={"comparison_code": code, "approved": True, "grants": [SET_LIGHT]},
        headers=bearer(person.user),
    )
    assert r.status_code == 200, r.text
    phone.expect("Connected over the WebSocket")
    call = person.invoke(SET_LIGHT, arguments={"on": True}, wait=TIMEOUT)
    assert call["status"] == "done"


def test_pair_refuses_a_link_without_a_code_and_a_used_code(person: Person) -> None:
    key = person.folder / "k.pem"
    assert tapgate("device", "keygen", str(key)).returncode == 0
    no_code = tapgate("device", "pair", f"{person.server.url}/app/", str(key), "ana-lamp")
    assert no_code.returncode == 2
    assert "#pair=" in no_code.stderr
    pairing = person.client.post("/v1/users/ana/pairings", json={}, headers=bearer(person.user)).json()
    state = str(person.folder / "s.json")
    first = tapgate("device", "pair", pairing["url"], str(key), "ana-lamp", "--state", state)
    assert first.returncode == 0, first.stderr
    second = tapgate("device", "pair", pairing["url"], str(key), "ana-phone", "--state", state)
    assert second.returncode == 1
    assert "refused the pairing" in second.stderr


def test_run_reconnects_after_the_gateway_restarts_and_answers_again(
    tmp_path: Path, run_phone: Callable[..., RunningPhone]
) -> None:
    server, url = _gateway(tmp_path)
    ana: Person | None = None
    phone: RunningPhone | None = None
    try:
        ana = _person(server, url, tmp_path)
        phone = _lamp_phone(run_phone, ana.pair())
        assert ana.invoke(SET_LIGHT, arguments={"on": True}, wait=TIMEOUT)["status"] == "done"
        server.kill()
        phone.expect("The link dropped; reconnecting")
        server.start()
        phone.expect("Connected over the WebSocket", seconds=45)
        again = ana.invoke(SET_LIGHT, arguments={"on": False}, wait=TIMEOUT)
        assert again["status"] == "done", again
        assert again["result"]["message"] == "the lamp is off"
    finally:
        if phone is not None:
            phone.kill()  # first: a gateway stops at once when no link holds it open
        if ana is not None:
            ana.client.close()
        server.kill()


# vectors


def test_vectors_check_passes_the_suites_vectors(tmp_path: Path) -> None:
    checked = tapgate("device", "vectors", "check", str(VECTORS))
    assert checked.returncode == 0, checked.stderr
    cases = len(json.loads(VECTORS.read_text())["cases"])
    assert f"all {cases} cases verify" in checked.stdout


@pytest.mark.parametrize(
    ("field", "why"), [("signature", "signature does not verify"), ("payload", "payload is not the text")]
)
def test_vectors_check_fails_a_copy_with_one_byte_changed(tmp_path: Path, field: str, why: str) -> None:
    doc = json.loads(VECTORS.read_text())
    value = doc["cases"][1][field]
    middle = len(value) // 2
    doc["cases"][1][field] = value[:middle] + ("B" if value[middle] != "B" else "C") + value[middle + 1 :]
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    checked = tapgate("device", "vectors", "check", str(changed))
    assert checked.returncode == 1
    assert "case 1" in checked.stderr
    assert why in checked.stderr


def test_vectors_check_passes_vectors_under_another_format_name(tmp_path: Path) -> None:
    other = tmp_path / "keep.json"
    other.write_text(json.dumps(generate_vectors(datetime.now(UTC), format="keep-approval-v1")))
    checked = tapgate("device", "vectors", "check", str(other))
    assert checked.returncode == 0, checked.stderr
    assert "format keep-approval-v1" in checked.stdout


def test_vectors_check_says_2_for_a_missing_file_and_1_for_one_that_is_not_vectors(tmp_path: Path) -> None:
    assert tapgate("device", "vectors", "check", str(tmp_path / "nope.json")).returncode == 2
    assert tapgate("device", "vectors", "check").returncode == 2
    not_json = tmp_path / "x.json"
    not_json.write_text("{")
    assert tapgate("device", "vectors", "check", str(not_json)).returncode == 1
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(json.loads(VECTORS.read_text()) | {"cases": []}))
    failed = tapgate("device", "vectors", "check", str(empty))
    assert failed.returncode == 1
    assert "cases" in failed.stderr


# the run loop's core, in process


class Screen:
    """Records what the phone shows; tests wait for a line."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Event()

    def _add(self, line: str) -> None:
        self.lines.append(line)
        self._changed.set()

    def call(self, call: Call) -> None:
        self._add(f"card {call.id}")

    def approval(self, request: Request) -> None:
        self._add(f"approval {request.id}")

    def answered(self, call: Call, status: str, message: str | None, outcome: str) -> None:
        self._add(f"answered {call.id} {status} {message} ({outcome})")

    def decided(self, request: Request, status: str, outcome: str) -> None:
        self._add(f"decided {request.id} {status} ({outcome})")

    def note(self, text: str) -> None:
        self._add(text)

    async def expect(self, text: str) -> str:
        with anyio.fail_after(LINE_SECONDS):
            while True:
                found = [line for line in self.lines if text in line]
                if found:
                    return found[0]
                self._changed.clear()
                await self._changed.wait()


class Refused:
    """A WebSocket connect that never connects, as behind a proxy that refuses upgrades."""

    def __init__(self) -> None:
        self.attempts = 0

    def __call__(self, url: str, headers: Mapping[str, str]) -> AbstractAsyncContextManager[Link]:
        self.attempts += 1
        raise ConnectionRefusedError(111, "Connection refused")


async def _approve(request: Request) -> Verdict:
    return Verdict(Decision.APPROVED)


async def _done(call: Call) -> Answer:
    return Answer.DONE


@asynccontextmanager
async def _running(phone: Phone) -> AsyncIterator[asyncio.Task[Ending]]:
    task = asyncio.create_task(phone.run())
    try:
        yield task
    finally:
        phone.stop()
        with anyio.fail_after(10):
            await asyncio.gather(task, return_exceptions=True)


async def _enrolled(person: Person, client: httpx.AsyncClient, key: Any) -> str:
    # It runs the lamp's handlers and approves for ana as well: it declares approvals, and is granted it.
    manifest = [*LAMP_MANIFEST, {"name": "approvals"}]
    body = device_body(key, "ana-lamp", None, "lamp", manifest) | {
        "grants": [SET_LIGHT, "unplug", "approvals"]
    }
    r = await client.post("/v1/users/ana/devices", json=body, headers=bearer(person.operator))
    assert r.status_code == 201, r.text
    return str(r.json()["device_token"])


async def test_the_phone_long_polls_when_the_websocket_cannot_connect(person: Person) -> None:
    key = generate_key(KeyAlgorithm.ED25519)
    refused, screen = Refused(), Screen()
    async with httpx.AsyncClient(base_url=person.server.url, timeout=TIMEOUT + 10) as client:
        phone = Phone(
            http=client,
            device_id="ana-lamp",
            token=await _enrolled(person, client, key),
            key=key,
            connect=refused,
            decide_call=_done,
            decide_approval=_approve,
            screen=screen,
            handlers=load_handlers("tapgate.device.examples"),
            poll_wait=5,
        )
        async with _running(phone) as running:
            await screen.expect("long-polling instead")
            agent = bearer(person.agent)
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__ana_lamp__set_light", "arguments": {"on": True}, "wait": TIMEOUT},
                headers=agent,
            )
            assert r.json()["status"] == "done", r.text
            assert r.json()["result"]["message"] == "the lamp is on"
            line = await screen.expect(f"answered {r.json()['id']} done")
            assert line.endswith("(accepted)")  # posted over HTTP, not over a WebSocket
            assert refused.attempts >= 1

            # an approval signed with the Ed25519 key, then the call it let through, all without a link
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__ana_lamp__unplug", "arguments": {}, "wait": TIMEOUT},
                headers=agent,
            )
            assert r.json()["status"] == "done", r.text
            await screen.expect("approved (signed by ana-lamp)")

            await client.delete("/v1/users/ana/devices/ana-lamp", headers=bearer(person.operator))
            with anyio.fail_after(LINE_SECONDS):
                ending = await running
    assert ending.revoked
    assert "Pair it again" in ending.message


async def test_a_card_held_open_does_not_make_the_long_poll_ask_again_and_again(person: Person) -> None:
    key = generate_key(KeyAlgorithm.P256)
    polls: list[tuple[int, float]] = []  # (calls handed over, seconds the request took)
    answer, second = asyncio.Event(), asyncio.Event()
    started: dict[int, float] = {}

    async def sent(request: httpx.Request) -> None:
        if request.url.path == "/v1/device/invocations":
            started[id(request)] = time.monotonic()

    async def received(response: httpx.Response) -> None:
        if response.request.url.path == "/v1/device/invocations":
            await response.aread()
            took = time.monotonic() - started[id(response.request)]
            polls.append((len(response.json()["invocations"]), took))
            if polls[-1][0] == 0 and any(n for n, _ in polls):  # a poll after the one with the call
                second.set()

    async def decide(call: Call) -> Answer:
        await answer.wait()  # the person is still reading the card
        return Answer.DONE

    hooks: dict[str, list[Any]] = {"request": [sent], "response": [received]}
    async with httpx.AsyncClient(base_url=person.server.url, timeout=30, event_hooks=hooks) as client:
        phone = Phone(
            http=client,
            device_id="ana-lamp",
            token=await _enrolled(person, client, key),
            key=key,
            connect=Refused(),
            decide_call=decide,
            decide_approval=_approve,
            screen=Screen(),
            watch_inbox=False,
            poll_wait=2,
        )
        async with _running(phone):
            agent = bearer(person.agent)
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__ana_lamp__set_light", "arguments": {"on": True}},
                headers=agent,
            )
            with anyio.fail_after(LINE_SECONDS):
                await second.wait()
            # The gateway does not hand the held call again: the next long-poll waits its full time.
            handed = [n for n, _ in polls]
            assert handed[-2:] == [1, 0], polls
            assert polls[-1][1] >= 1.5, polls
            answer.set()
            view = await client.get(f"/v1/invocations/{r.json()['id']}?wait={TIMEOUT}", headers=agent)
            assert view.json()["status"] == "done"


class LosingLink:
    """A link that delivers one call, swallows its answer and drops: the answer never reaches the gateway."""

    def __init__(self, frame: dict[str, Any]) -> None:
        self.frames = [json.dumps(frame)]
        self.sent: list[dict[str, Any]] = []
        self._answered = asyncio.Event()

    async def send(self, message: str) -> None:
        self.sent.append(json.loads(message))
        self._answered.set()

    async def recv(self) -> str:
        if self.frames:
            return self.frames.pop()
        await self._answered.wait()
        raise ConnectionClosed(None, None)


async def test_an_answer_lost_with_its_link_is_sent_again_over_http_without_asking_again(
    person: Person,
) -> None:
    key = generate_key(KeyAlgorithm.P256)
    screen, asked = Screen(), []

    async def decide(call: Call) -> Answer:
        asked.append(call.id)
        return Answer.DONE

    async with httpx.AsyncClient(base_url=person.server.url, timeout=TIMEOUT + 10) as client:
        token = await _enrolled(person, client, key)
        r = await client.post(
            "/v1/invocations",
            json={"tool": "device__ana_lamp__set_light", "arguments": {"on": True}},
            headers=bearer(person.agent),
        )
        call_id = r.json()["id"]
        frame = {"type": "device:invoke", "callId": call_id, "tool": "device__ana_lamp__set_light",
                 "capability": SET_LIGHT, "input": {"on": True}}  # fmt: skip
        losing = LosingLink(frame)
        links: list[LosingLink] = [losing]

        @asynccontextmanager
        async def connect(url: str, headers: Mapping[str, str]) -> AsyncIterator[Link]:
            if not links:
                raise ConnectionRefusedError(111, "Connection refused")
            yield links[0]
            links.clear()

        phone = Phone(
            http=client,
            device_id="ana-lamp",
            token=token,
            key=key,
            connect=connect,
            decide_call=decide,
            decide_approval=_approve,
            screen=screen,
            handlers=load_handlers("tapgate.device.examples"),
            backoff=Backoff(base=0.05, cap=0.05),
            watch_inbox=False,
            poll_wait=5,
        )
        async with _running(phone):
            r = await client.get(f"/v1/invocations/{call_id}?wait={TIMEOUT}", headers=bearer(person.agent))
            view = r.json()
            assert view["status"] == "done", view
            assert view["result"]["message"] == "the lamp is on"
            await screen.expect(f"answered {call_id} done the lamp is on (accepted)")
    assert asked == [call_id]  # the person was asked once
    assert losing.sent == [
        {"type": "device:result", "callId": call_id, "status": "done", "message": "the lamp is on"}
    ]


class Clock:
    """A clock that moves only when the phone sleeps; records each sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.phone: Phone | None = None
        self.stop_after = 0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if len(self.sleeps) >= self.stop_after and self.phone is not None:
            self.phone.stop()
        await asyncio.sleep(0)


def _unreachable(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("Connection refused", request=request)


@asynccontextmanager
async def _offline_phone(connect: Any, clock: Clock, stop_after: int) -> AsyncIterator[Phone]:
    transport = httpx.MockTransport(_unreachable)
    async with httpx.AsyncClient(base_url="http://gateway.test", transport=transport) as client:
        phone = Phone(
            http=client,
            device_id="ana-lamp",
            token="tgd_x",
            key=generate_key(KeyAlgorithm.P256),
            connect=connect,
            decide_call=_done,
            decide_approval=_approve,
            screen=Screen(),
            sleep=clock.sleep,
            clock=clock,
            backoff=Backoff(base=0.5, cap=4.0),
            watch_inbox=False,
        )
        clock.phone, clock.stop_after = phone, stop_after
        yield phone


async def test_an_unreachable_gateway_is_retried_with_doubling_delays_up_to_the_cap() -> None:
    clock = Clock()
    async with _offline_phone(Refused(), clock, stop_after=7) as phone:
        with anyio.fail_after(5):
            ending = await phone.run()
    assert not ending.revoked
    assert clock.sleeps[:7] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]


class DroppingLink:
    """A link that lives ``lifetime`` seconds on the clock, then drops."""

    def __init__(self, clock: Clock, lifetime: float) -> None:
        self.clock, self.lifetime = clock, lifetime

    async def send(self, message: str) -> None:
        raise ConnectionClosed(None, None)

    async def recv(self) -> str:
        self.clock.now += self.lifetime
        raise ConnectionClosed(None, None)


async def test_a_link_that_keeps_dropping_backs_off_and_one_that_lived_resets_the_delay() -> None:
    clock = Clock()
    lifetimes = itertools.chain([0.0, 0.0, 0.0, 30.0, 0.0], itertools.repeat(0.0))

    @asynccontextmanager
    async def connect(url: str, headers: Mapping[str, str]) -> AsyncIterator[Link]:
        assert url == "ws://gateway.test/v1/device/connect"
        assert headers == {"Authorization": "Bearer tgd_x"}
        yield DroppingLink(clock, next(lifetimes))

    async with _offline_phone(connect, clock, stop_after=5) as phone:
        with anyio.fail_after(5):
            await phone.run()
    assert clock.sleeps[:5] == [0.5, 1.0, 2.0, 0.5, 1.0]


def test_a_backoff_with_jitter_stays_within_the_upper_half_of_each_step() -> None:
    import random

    backoff = Backoff(base=1.0, cap=8.0, rng=random.Random(7))
    for failures, full in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        for _ in range(50):
            assert full / 2 <= backoff.delay(failures) <= full


def test_handlers_load_from_a_module_a_function_or_a_registry() -> None:
    from tapgate.device import examples

    assert set(load_handlers("tapgate.device.examples")) == {SET_LIGHT, "unplug"}
    assert set(load_handlers("tapgate.device.examples:set_light")) == {SET_LIGHT}
    registry = Handlers()

    @registry.handler("blink")
    def blink(arguments: dict[str, Any]) -> str:
        return "blinked"

    assert registry["blink"]({}) == "blinked"
    assert (
        examples.set_light({"on": True, "brightness": 50, "scene": "warm"}) == "the lamp is on at 50%, warm"
    )
    with pytest.raises(ValueError, match="between 0 and 100"):
        examples.set_light({"on": True, "brightness": -1})


@pytest.mark.parametrize(
    ("link", "gateway"),
    [
        ("http://127.0.0.1:8080/app/#pair=tgp_default_0123456789abcdef_" + "a" * 32, "http://127.0.0.1:8080"),
        (
            "https://home.example/tapgate/app/#pair=tgp_x_0123456789abcdef_" + "b" * 32,
            "https://home.example/tapgate",
        ),
    ],
)
def test_a_pairing_link_names_its_gateway_and_carries_the_code_in_its_fragment(
    link: str, gateway: str
) -> None:
    parsed = parse_pairing_link(link)
    assert parsed.gateway_url == gateway
    assert parsed.code == link.split("#pair=")[1]
    with pytest.raises(StateError, match="#pair="):
        parse_pairing_link(link.split("#")[0])


def test_a_card_shows_control_characters_as_escapes_never_raw() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    call = Call("inv_1", "device__ana_lamp__set_light", SET_LIGHT, {"scene": "warm\x1b[2J\u202e"}, None)
    CardScreen(console).call(call)
    shown = out.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "warm\\u001b[2J\\u202e" in shown


def test_an_approval_card_says_who_asks_what_and_why_and_its_time_as_the_clock_reads() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    request = Request.read(
        {
            "id": "apr_1",
            "kind": "set_light",
            "subject": "desk-lamp",
            "prompt": "Ana's planner asks to use Desk lamp: Switch the lamp.",
            "preview": {
                "title": "Switch the lamp",
                "description": "Turn the lamp on or off.",
                "who": "Ana's planner",
                "why": "Lights after dark need your yes",
                "fields": [{"label": "Light", "value": "On"}],
            },
            "binding_code": "X4DQ",
            "expires_at": "2026-11-30T07:08:20+00:00",
            "agent_asks": True,
        }
    )
    assert request is not None
    CardScreen(console).approval(request)
    shown = out.getvalue()
    assert "Ana's planner asks to use Desk lamp: Switch the lamp." in shown
    assert "Turn the lamp on or off." in shown
    assert "Lights after dark need your yes" in shown
    assert "Light" in shown and "On" in shown and "X4DQ" in shown
    local = datetime.fromisoformat("2026-11-30T07:08:20+00:00").astimezone().strftime("%H:%M")
    assert f"answer by  {local}" in shown and "2026-11-30T" not in shown


async def test_the_prompts_show_their_key_letters(monkeypatch: pytest.MonkeyPatch) -> None:
    from tapgate.device.prompts import Ask

    console = Console(file=io.StringIO(), record=True, width=200)
    ask = Ask(console)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\na\n"))
    call = Call("inv_1", "device__ana_lamp__set_light", SET_LIGHT, {"on": True})
    assert await ask.call(call) is Answer.DONE
    asked = {"id": "apr_1", "kind": "unplug", "subject": "ana-lamp", "prompt": "Unplug?", "agent_asks": True}
    request = Request.read(asked)
    assert request is not None
    assert (await ask.approval(request)) == Verdict(Decision.APPROVED)
    shown = console.export_text()
    assert "[y]es, [n]o (decline), [f]ailed" in shown
    assert "[a]pprove, [d]eny, or [w] this wasn't me" in shown


async def test_this_wasnt_me_is_offered_only_where_an_agent_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from tapgate.device.prompts import Ask

    console = Console(file=io.StringIO(), record=True, width=200)
    monkeypatch.setattr("sys.stdin", io.StringIO("w\nd\n\n"))
    pairing = Request.read(
        {"id": "apr_2", "kind": "device_pair", "subject": "tablet", "prompt": "Let it in?"}
    )
    assert pairing is not None
    assert (await Ask(console).approval(pairing)) == Verdict(Decision.DENIED)  # "w" is not a key here
    shown = console.export_text()
    assert "Decide: [a]pprove or [d]eny" in shown
    assert "wasn't me" not in shown


def test_run_never_says_connected_for_a_revoked_device(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    person.revoke()
    phone = run_phone("--state", str(state), "--auto", "done")
    assert phone.wait() == 1
    assert "Pair it again" in phone.stderr()
    assert not any("Connected" in line for line in phone.lines), phone.lines
    assert phone.process.stdout is not None
    assert "Connected" not in phone.process.stdout.read()


async def test_on_a_websocket_the_phone_gets_approvals_live_without_polling_the_inbox(person: Person) -> None:
    from tapgate.device.cli import _connect_trusting

    key = generate_key(KeyAlgorithm.P256)
    inbox_polls: list[str] = []
    screen = Screen()

    async def count(request: httpx.Request) -> None:
        if request.url.path == "/v1/inbox":
            inbox_polls.append(request.url.path)

    hooks: dict[str, list[Any]] = {"request": [count]}
    async with httpx.AsyncClient(
        base_url=person.server.url, timeout=TIMEOUT + 10, event_hooks=hooks
    ) as client:
        phone = Phone(
            http=client,
            device_id="ana-lamp",
            token=await _enrolled(person, client, key),
            key=key,
            connect=_connect_trusting(True),
            decide_call=_done,
            decide_approval=_approve,
            screen=screen,
            handlers=load_handlers("tapgate.device.examples"),
        )
        async with _running(phone):
            await screen.expect("Connected over the WebSocket")
            r = await client.post(
                "/v1/invocations",
                json={"tool": "device__ana_lamp__unplug", "arguments": {}, "wait": TIMEOUT},
                headers=bearer(person.agent),
            )
            assert r.json()["status"] == "done", r.text
            await screen.expect("approved (signed by ana-lamp)")
            line = await screen.expect(f"answered {r.json()['id']} done")
            assert "sent over the WebSocket" in line
    assert inbox_polls == []


def test_run_shows_an_agents_notice_that_arrives_on_its_link_once(
    person: Person, run_phone: Callable[..., RunningPhone]
) -> None:
    state = person.pair()
    phone = _lamp_phone(run_phone, state)
    body = {"event": "run.finished", "data": {"run_id": "r-7", "ok": True}}
    r = person.client.post("/v1/notices", json=body, headers=bearer(person.agent))
    assert r.status_code == 202 and r.json() == {"delivered_to": ["ana-lamp"]}, r.text
    phone.expect(r"notice run\.finished \(ok=True run_id=r-7\)")
    person.invoke(SET_LIGHT, arguments={"on": True})  # a call after it: the notice is not shown again
    phone.expect("answered")
    assert sum("notice run.finished" in line for line in phone.lines) == 1


def test_a_phone_pairs_declaring_approvals_and_a_lamp_does_not(person: Person) -> None:
    person.pair("ana-lamp")  # first: once ana has an approver, a new device is vouched for on it
    person.pair("ana-phone", kind="phone", grants=("approvals",))
    devices = person.client.get("/v1/users/ana/devices", headers=bearer(person.user)).json()["devices"]
    declared = {d["device_id"]: {c["name"]: c["granted"] for c in d["capabilities"]} for d in devices}
    assert declared["ana-phone"]["approvals"] is True
    assert "approvals" not in declared["ana-lamp"]


def test_device_login_signs_the_person_into_the_console_with_the_phones_key(person: Person) -> None:
    # Paired as a phone, it declares approvals; the person grants it ("can approve for you").
    state = person.pair("ana-phone", kind="phone", grants=(SET_LIGHT, "unplug", "approvals"))
    tenant = person.operator.split("_")[1]
    relayed = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0 Ana's MacBook"}
    with httpx.Client(base_url=person.server.url, timeout=TIMEOUT, headers=relayed) as browser:
        page = browser.get("/console/sign-in", params={"tenant": tenant})
        assert page.status_code == 200, page.text
        link = re.search(r"https?://[^\"'\s<]+/app/#console=[\w.-]+", page.text)
        assert link is not None
        signed = tapgate("device", "login", link.group(0), "--state", str(state), "--yes")
        assert signed.returncode == 0, signed.stderr
        assert "Signed in" in signed.stdout
        # the card says where the request came from, as the server saw it, never the browser's own words
        assert "on this phone's network (127.0.0.1)" in signed.stdout
        assert "Firefox on Linux" in signed.stdout and "MacBook" not in signed.stdout
        done = browser.get("/console/sign-in/status", headers={"hx-request": "true"})
        assert done.headers.get("hx-redirect") == "/console/devices"
        assert browser.get("/console/devices").status_code == 200  # the session cookie works
    declined = tapgate("device", "login", f"{person.server.url}/app/#console=nope", "--state", str(state))
    assert declined.returncode == 2 and "not a console sign-in link" in declined.stderr
