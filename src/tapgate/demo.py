"""``tapgate demo``: the whole story against a real gateway on a fresh temporary SQLite.

Every step is done the way a user would do it (the CLI, then HTTP), and checked; the demo exits 0 only
when every step did what it says.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape

from tapgate.device.examples import LAMP_MANIFEST

console = Console(stderr=False, highlight=False)


class StepFailed(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tapgate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tapgate", *args], capture_output=True, text=True, timeout=60, check=False
    )


def _cut(detail: str, width: int = 60) -> str:
    """A long detail shortened, and seen to be: a link cut without a mark looks whole."""
    return detail if len(detail) <= width else f"{detail[: width - 1]}…"


def _step(title: str, ok: bool, detail: str = "") -> None:
    mark = "[green]ok[/green]  " if ok else "[red]FAIL[/red]"
    # One line a step, wrapped by the terminal, never by rich: a link or a code is never split mid-word.
    shown = f" [dim]{escape(detail)}[/dim]" if detail else ""
    console.print(f"{mark} {escape(title)}{shown}", soft_wrap=True)
    if not ok:
        raise StepFailed(title)


@contextlib.contextmanager
def _gateway(config: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tapgate", "serve", "--config", str(config), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"TAPGATE_PUBLIC_URL": f"http://127.0.0.1:{port}"},
    )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(client: httpx.Client, process: subprocess.Popen[str], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        with contextlib.suppress(httpx.TransportError):
            if client.get("/readyz").status_code == 200:
                return True
        time.sleep(0.1)
    return False


PHONE_MANIFEST = [*LAMP_MANIFEST, {"name": "sms_send"}, {"name": "phone_actions"}]


def _phone(
    folder: Path, client: httpx.Client, user: dict[str, str], operator: dict[str, str]
) -> subprocess.Popen[str]:
    """Pair a terminal phone by its link and comparison code, and start it answering. ana has no device
    yet to vouch for it and the gateway requires device signatures, so the operator consents."""
    key = folder / "phone.pem"
    made = _tapgate("device", "keygen", str(key))
    _step("tapgate device keygen makes the phone's P-256 key", made.returncode == 0, made.stderr.strip())
    r = client.post("/v1/users/ana/pairings", json={}, headers=user)
    _step(
        "ana asks for a pairing link (and its QR code)", r.status_code == 201, _cut(r.json().get("url", ""))
    )
    pairing = r.json()
    qr = client.get(f"/v1/pairings/{pairing['pairing_id']}/qr.svg", headers=user)
    _step("the QR code draws as SVG", qr.status_code == 200 and "<svg" in qr.text)
    manifest = folder / "phone.json"
    manifest.write_text(json.dumps(PHONE_MANIFEST))
    state = folder / "phone-state.json"
    paired = _tapgate(
        "device",
        "pair",
        pairing["url"],
        str(key),
        "ana-phone",
        "--name",
        "Ana's phone",
        "--capability",
        f"@{manifest}",
        "--state",
        str(state),
    )
    code = paired.stdout.strip().splitlines()[-1].removeprefix("comparison code: ") if paired.stdout else ""
    _step("tapgate device pair claims the link and shows a comparison code", paired.returncode == 0, code)
    grants = ["set_light", "unplug", "sms_send", "phone_actions", "approvals"]
    consent = {"comparison_code": code, "approved": True, "grants": grants}
    r = client.post(f"/v1/pairings/{pairing['pairing_id']}/consent", json=consent, headers=user)
    _step(
        "ana's user token alone cannot let her first device in: signatures are required",
        r.status_code == 403,
        _cut(r.json()["error"]["message"]),
    )
    r = client.post(f"/v1/pairings/{pairing['pairing_id']}/consent", json=consent, headers=operator)
    _step(
        "the operator checks the code with ana and consents: the lamp, texts, phone actions, and approvals "
        "(it can approve for her)",
        r.status_code == 200,
        _cut(r.text),
    )
    return _run_phone(folder)


def _run_phone(folder: Path) -> subprocess.Popen[str]:
    """``tapgate device run`` for ana's phone: it does and approves what it is asked (a demo's person)."""
    state = folder / "phone-state.json"
    log = (folder / "phone.log").open("a")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tapgate",
            "device",
            "run",
            "--state",
            str(state),
            "--auto",
            "done",
            "--approve",
            "auto-approve",
            "--handlers",
            "tapgate.device.examples",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _agent_story(
    client: httpx.Client, agent: dict[str, str], phone: dict[str, str], operator: dict[str, str]
) -> None:
    r = client.get("/v1/tools", headers=agent)
    names = [t["function"]["name"] for t in r.json()["tools"]]
    expected = ["device__ana_phone__set_light", "device__ana_phone__unplug", "device__ana_phone__sms_send"]
    _step("the agent sees exactly the granted device tools", names == expected, ", ".join(names))

    def call(tool: str, arguments: dict[str, object], **extra: object) -> dict[str, Any]:
        body = {"tool": tool, "arguments": arguments, "wait": 30, **extra}
        return dict(client.post("/v1/invocations", json=body, headers=agent, timeout=40).json())

    lamp = call("device__ana_phone__set_light", {"on": True, "brightness": 40})
    result = lamp.get("result") or {}
    _step(
        "the agent switches the lamp; the phone's handler answers",
        lamp["status"] == "done",
        str(result.get("message")),
    )
    client.put("/v1/sessions/chat-1", json={"kind": "chat", "attended": True}, headers=agent)
    client.post(
        "/v1/sessions/chat-1/messages",
        json={"device_id": "ana-phone", "capabilities": ["phone_actions"]},
        headers=agent,
    )
    torch = call("phone_action", {"action": "torch", "on": True, "summary": "Torch on"}, session_id="chat-1")
    _step(
        "in ana's chat the agent turns the torch on with phone_action",
        torch["status"] == "done",
        str((torch.get("result") or {}).get("text", "")).splitlines()[0],
    )
    unplug = call("device__ana_phone__unplug", {})
    _step(
        "unplugging asks ana: her phone signs the approval and then does it",
        unplug["status"] == "done",
        f"binding code {unplug.get('binding_code')}",
    )
    entries = client.get("/v1/audit?limit=1000", headers=operator).json()["entries"]
    decided = [e["data"].get("decided_by") for e in entries if e["action"] == "approval.decided"]
    _step(
        "the journal shows the decision signed by the phone's key",
        decided == ["device:ana-phone"],
        str(decided),
    )
    secret = call("device__ana_phone__sms_send", {"to": "+15551234567", "body": "key AKIAIOSFODNN7EXAMPLE"})
    _step(
        "a text carrying a cloud key is refused before anything is written",
        secret["status"] == "refused",
        str(secret.get("reason")),
    )
    sms = {
        "channel": "sms",
        "sender": "+15550001111",
        "body": "Your parcel comes at 10",
        "received_at": "2026-11-30T09:00:00Z",
    }
    r = client.post("/v1/device/ingest", json=sms, headers=phone)
    _step(
        "the phone forwards a received SMS: kept once, routed to triage",
        r.status_code == 202,
        r.json().get("session_id", ""),
    )
    ingest = _first_event(client, agent, "ingest.message")
    _step(
        "the agent's event stream carries it as untrusted content",
        ingest.get("trust") == "untrusted",
        _cut(str(ingest.get("framing", ""))),
    )


def _vouching_story(folder: Path, client: httpx.Client, user: dict[str, str]) -> None:
    """A second device: ana's user token cannot let it in; her phone, shown its comparison code, signs."""
    r = client.post("/v1/users/ana/pairings", json={}, headers=user)
    pairing = r.json()
    key = folder / "tablet.pem"
    _tapgate("device", "keygen", str(key))
    paired = _tapgate(
        "device", "pair", pairing["url"], str(key), "ana-tablet", "--name", "Ana's tablet",
        "--state", str(folder / "tablet-state.json"),
    )  # fmt: skip
    code = paired.stdout.strip().splitlines()[-1].removeprefix("comparison code: ") if paired.stdout else ""
    _step("a tablet claims a new pairing link", paired.returncode == 0, code)
    consent = {"comparison_code": code, "approved": True}
    r = client.post(f"/v1/pairings/{pairing['pairing_id']}/consent", json=consent, headers=user)
    _step(
        "ana has a phone now: her user token alone cannot pair the tablet",
        r.status_code == 403,
        _cut(r.json()["error"]["message"]),
    )
    phone = _run_phone(folder)  # ana opens her phone
    try:
        status = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and status != "confirmed":
            time.sleep(0.2)
            status = client.get(f"/v1/pairings/{pairing['pairing_id']}", headers=user).json()["status"]
    finally:
        phone.terminate()
        phone.wait(timeout=10)
    _step(
        "ana's phone shows the tablet and its comparison code, and signs the device_pair approval",
        status == "confirmed",
        status,
    )


def _console_story(client: httpx.Client, config: Path) -> str:
    """The person's console: the operator prints ana a one-time sign-in link, and it opens her devices."""
    url = str(client.base_url).rstrip("/")
    printed = _tapgate(
        "console", "link", "--tenant", "default", "--user", "ana", "--url", url, "--config", str(config)
    )
    link = printed.stdout.strip().splitlines()[-1] if printed.stdout.strip() else ""
    _step("tapgate console link prints ana a one-time sign-in link", printed.returncode == 0, link)
    path = "/" + link.split("://", 1)[-1].split("/", 1)[-1]
    signed = client.post(path, content=b"", headers={"content-type": "application/x-www-form-urlencoded"})
    page = client.get("/console/devices", cookies=signed.cookies)
    _step(
        "the link signs ana into her console, which lists her devices and their grants",
        signed.status_code == 303 and page.status_code == 200 and "Your devices" in page.text,
        str(page.status_code),
    )
    again = client.post(path, content=b"", headers={"content-type": "application/x-www-form-urlencoded"})
    _step("the same link does not sign in twice", again.status_code == 410, str(again.status_code))
    return link


def _first_event(client: httpx.Client, agent: dict[str, str], kind: str) -> dict[str, object]:
    with client.stream("GET", "/v1/events", headers=agent, timeout=10) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                data = json.loads(line[6:])
                if data.get("type") == kind:
                    return dict(data)
    return {}


def run_demo(keep: bool = False) -> int:
    folder = Path(tempfile.mkdtemp(prefix="tapgate-demo-"))
    console.print(f"[bold]tapgate demo[/bold] in {folder}")
    try:
        _story(folder)
    except StepFailed as e:
        console.print(f"[red]The demo stopped at: {e}[/red]")
        return 1
    finally:
        if keep:
            console.print(f"Kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    console.print("[bold green]Every step did what it says.[/bold green]")
    # The demo's sign-in link is spent and its gateway stopped: say how to get a live one, not that one.
    console.print(
        "The person's console, on a gateway of your own: the README's \"Run it yourself\" starts one with "
        "ana and her lamp, then tapgate console link --tenant default --user ana prints a link that signs "
        "ana in once; or open /console/sign-in and scan its code with the paired phone (docs/console.md).",
        soft_wrap=True,
    )
    console.print(
        "[dim]One step further: with require_user_verification = true, each yes or no from the browser "
        "app also needs the person's passkey (face, fingerprint or screen lock), not only the phone's "
        "key (docs/browser-app.md).[/dim]",
        soft_wrap=True,
    )
    return 0


def _story(folder: Path) -> str:
    """The whole story; the console sign-in link the operator printed for ana."""
    made = _tapgate("init", "--dir", str(folder))
    _step(
        "tapgate init writes tapgate.toml, migrates SQLite, creates tenant 'default'",
        made.returncode == 0,
        made.stderr.strip(),
    )
    operator = made.stdout.strip().splitlines()[-1]
    config = folder / "tapgate.toml"
    port = _free_port()
    with (
        _gateway(config, port) as process,
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client,
    ):
        _step(f"tapgate serve answers /readyz on 127.0.0.1:{port}", _wait_ready(client, process))
        _step("/healthz says ok", client.get("/healthz").json() == {"status": "ok"})
        as_operator = {"Authorization": f"Bearer {operator}"}
        r = client.post("/v1/users", json={"user_id": "ana", "display_name": "Ana"}, headers=as_operator)
        _step("the operator adds the person 'ana'", r.status_code == 201, str(r.status_code))
        r = client.post(
            "/v1/users/ana/tokens", json={"kind": "agent", "agent_id": "assistant"}, headers=as_operator
        )
        _step(
            "the operator mints an agent token for ana", r.status_code == 201, ", ".join(r.json()["scopes"])
        )
        agent = r.json()["token"]
        r = client.post("/v1/users/ana/tokens", json={"kind": "user"}, headers=as_operator)
        _step("the operator mints ana's own user token", r.status_code == 201, ", ".join(r.json()["scopes"]))
        user = r.json()["token"]
        phone = _phone(folder, client, {"Authorization": f"Bearer {user}"}, as_operator)
        try:
            token = json.loads((folder / "phone-state.json").read_text())["token"]
            _agent_story(
                client,
                {"Authorization": f"Bearer {agent}"},
                {"Authorization": f"Bearer {token}"},
                as_operator,
            )
        finally:
            phone.terminate()
            phone.wait(timeout=10)
        _vouching_story(folder, client, {"Authorization": f"Bearer {user}"})
        r = client.post("/v1/users", json={"user_id": "eve"}, headers={"Authorization": f"Bearer {agent}"})
        _step("an agent token cannot add people", r.status_code == 403, r.json()["error"]["message"])
        r = client.post("/v1/users", json={"user_id": "eve"})
        _step("no token, no entry", r.status_code == 401, r.json()["error"]["message"])
        r = client.get("/v1/audit", headers=as_operator)
        actions = [e["action"] for e in r.json()["entries"]]
        expected = {
            "user.created",
            "pairing.confirmed",
            "invocation.created",
            "invocation.answered",
            "approval.decided",
            "invocation.refused",
            "ingest.received",
        }
        _step("the audit journal holds every decision", expected <= set(actions), f"{len(actions)} entries")
        secret_free = all(token not in r.text for token in (operator, agent, user))
        _step("no token appears in the journal", secret_free)
        console_link = _console_story(client, config)
    verified = _tapgate("audit", "verify", "--config", str(config))
    _step(
        "tapgate audit verify finds the hash chain intact",
        verified.returncode == 0,
        verified.stdout.strip().splitlines()[-1] if verified.stdout.strip() else verified.stderr.strip(),
    )
    return console_link
