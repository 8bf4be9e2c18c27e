"""``tapgate device …``: the terminal phone. Exit 0 on success, 1 on a failure it
explains, 2 on misuse."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import httpx
import typer
from rich.console import Console
from websockets.asyncio.client import connect as websocket_connect

from tapgate.device.cards import Screen, comparison_panel
from tapgate.device.handlers import HandlerError, Handlers, load_handlers
from tapgate.device.keyfile import KeyFileError, generate_key, public_key_base64, read_key, write_key
from tapgate.device.manifest import APPROVALS, ManifestError, device_body, read_capabilities
from tapgate.device.phone import Answer, Link, Phone
from tapgate.device.prompts import Ask, always, always_decide
from tapgate.device.reaching import unreachable
from tapgate.device.signing import CannotSign, decision_body
from tapgate.device.state import DEFAULT_STATE, PhoneState, StateError, parse_pairing_link
from tapgate.domain.approvals import Decision, PrivateKey
from tapgate.domain.errors import VectorsError
from tapgate.domain.keys import KeyAlgorithm
from tapgate.domain.vectors import check_vectors
from tapgate.dropped import RetryDropped
from tapgate.trust import CA_FILE_ENV, UnreadableCaFile, trust, untrusted_line

__all__ = ["CaFileOption", "device_app", "unreachable"]

device_app = typer.Typer(
    help="The terminal phone: keys, enrol, pair, run, decide, login, vectors.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
vectors_app = typer.Typer(help="Approval-signature test vectors.", no_args_is_help=True)
device_app.add_typer(vectors_app, name="vectors")

TIMEOUT = 15.0

StateOption = Annotated[
    Path, typer.Option("--state", help="The phone's state file (gateway, device id, token, key file).")
]
NameOption = Annotated[
    str | None, typer.Option("--name", help="What the person calls it (default: from the id).")
]
KindOption = Annotated[str, typer.Option("--kind", help="What it is: phone, lamp, laptop…")]
CapabilityOption = Annotated[
    list[str] | None,
    typer.Option("--capability", help="A capability as JSON, or @file with one or a list; repeat for more."),
]
CaFileOption = Annotated[
    Path | None,
    typer.Option(
        "--ca-file",
        envvar=CA_FILE_ENV,
        help="A CA certificate (PEM) to trust for the gateway's https and wss, as 'tapgate tls init' makes.",
    ),
]
PushKindOption = Annotated[str | None, typer.Option("--push-kind", help="Push kind: fcm, apns, webpush…")]
PushTokenOption = Annotated[str | None, typer.Option("--push-token", help="The device's push address.")]


class ApproveMode(StrEnum):
    ASK = "ask"
    AUTO_APPROVE = "auto-approve"
    AUTO_DENY = "auto-deny"


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(code)


def _key(path: Path) -> PrivateKey:
    try:
        return read_key(path)
    except KeyFileError as e:
        _fail(str(e))


def _state(path: Path) -> PhoneState:
    try:
        return PhoneState.load(path)
    except StateError as e:
        _fail(str(e))


def _capabilities(values: list[str] | None, kind: str) -> list[dict[str, Any]]:
    """The manifest: the --capability entries, and for a phone the built-in ``approvals`` (it shows and
    signs the person's approvals, once the person grants it)."""
    try:
        found = read_capabilities(values or [])
    except ManifestError as e:
        _fail(str(e), 2)
    if kind == "phone" and all(entry.get("name") != APPROVALS for entry in found):
        found.append({"name": APPROVALS})
    return found


def _push(kind: str | None, token: str | None) -> dict[str, str] | None:
    if (kind is None) != (token is None):
        _fail("--push-kind and --push-token go together: pass both, or neither.", 2)
    return {"kind": kind, "token": token} if kind and token else None


def _error(r: httpx.Response) -> str:
    try:
        return str(r.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {r.status_code}: {r.text[:200]}"


def _trust(ca_file: Path | None) -> ssl.SSLContext | bool:
    try:
        return trust(ca_file)
    except UnreadableCaFile as e:
        _fail(str(e), 2)


def _request(method: str, url: str, ca_file: Path | None = None, **kwargs: Any) -> httpx.Response:
    try:
        return httpx.request(method, url, timeout=TIMEOUT, verify=_trust(ca_file), **kwargs)
    except httpx.TransportError as e:
        _fail(unreachable(url, e))


@device_app.command()
def keygen(
    file: Annotated[Path, typer.Argument(help="Where to write the private key (PKCS#8 PEM, mode 0600).")],
    alg: Annotated[KeyAlgorithm, typer.Option("--alg", help="p256 or ed25519.")] = KeyAlgorithm.P256,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Make a device key; print its public key (base64 SubjectPublicKeyInfo) on the last line."""
    key = generate_key(alg)
    try:
        write_key(file, key, force)
    except KeyFileError as e:
        _fail(str(e))
    typer.echo(f"Wrote a {alg} private key to {file} (readable by you only). Its public key:")
    typer.echo(public_key_base64(key))


@device_app.command()
def enrol(
    keyfile: Annotated[Path, typer.Argument(help="The device's private key file.")],
    device_id: Annotated[str, typer.Argument(help="The device's id: lower-case words joined by '-'.")],
    name: NameOption = None,
    kind: KindOption = "phone",
    push_kind: PushKindOption = None,
    push_token: PushTokenOption = None,
    capability: CapabilityOption = None,
    grant: Annotated[
        list[str] | None, typer.Option("--grant", help="A capability to grant at once; repeat for more.")
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="The gateway, to post the body to.")] = None,
    user: Annotated[str | None, typer.Option("--user", help="The person the device is for.")] = None,
    operator_token: Annotated[
        str | None, typer.Option("--operator-token", envvar="TAPGATE_OPERATOR_TOKEN", help="Operator token.")
    ] = None,
    state: Annotated[
        Path | None, typer.Option("--state", help="With --url: also write a state file for 'run'.")
    ] = None,
    ca_file: CaFileOption = None,
) -> None:
    """Print the enrolment body, or post it (--url, --user, --operator-token) and print the token.

    Posted, the device token is on the last line; --state also writes a state file for 'run'."""
    key = _key(keyfile)
    manifest = _capabilities(capability, kind)
    body = device_body(key, device_id, name, kind, manifest, _push(push_kind, push_token))
    if grant:
        body["grants"] = grant
    posting = [url, user, operator_token]
    if not any(posting):
        if state is not None:
            _fail("--state needs --url, --user and --operator-token: only a posted enrolment has a token.", 2)
        typer.echo(json.dumps(body, indent=2, ensure_ascii=False))
        return
    if not all(posting):
        _fail("To post the enrolment pass all of --url, --user and --operator-token.", 2)
    assert url is not None and user is not None
    r = _request(
        "POST",
        f"{url.rstrip('/')}/v1/users/{user}/devices",
        ca_file,
        json=body,
        headers={"Authorization": f"Bearer {operator_token}"},
    )
    if r.status_code != 201:
        _fail(f"The gateway refused the enrolment: {_error(r)}")
    token = str(r.json()["device_token"])
    if state is not None:
        PhoneState(url.rstrip("/"), device_id, token, str(keyfile.resolve())).save(state)
        typer.echo(f"Wrote the state file {state}.")
    typer.echo(f"Enrolled {device_id} for {user}. Its device token (shown once):")
    typer.echo(token)


@device_app.command()
def pair(
    url: Annotated[str, typer.Argument(help="The pairing link, …/app/#pair=<code>.")],
    keyfile: Annotated[Path, typer.Argument(help="The device's private key file.")],
    device_id: Annotated[str, typer.Argument(help="The device's id: lower-case words joined by '-'.")],
    name: NameOption = None,
    kind: KindOption = "phone",
    push_kind: PushKindOption = None,
    push_token: PushTokenOption = None,
    capability: CapabilityOption = None,
    state: StateOption = DEFAULT_STATE,
    ca_file: CaFileOption = None,
) -> None:
    """Claim a pairing link; show the comparison code the person types to let the device in."""
    try:
        link = parse_pairing_link(url)
    except StateError as e:
        _fail(str(e), 2)
    key = _key(keyfile)
    manifest = _capabilities(capability, kind)
    body = device_body(key, device_id, name, kind, manifest, _push(push_kind, push_token))
    r = _request("POST", f"{link.gateway_url}/v1/pair", ca_file, json=body | {"code": link.code})
    if r.status_code != 201:
        _fail(f"The gateway refused the pairing: {_error(r)}")
    paired = r.json()
    try:
        PhoneState(link.gateway_url, device_id, str(paired["device_token"]), str(keyfile.resolve())).save(
            state
        )
    except KeyFileError as e:
        _fail(str(e))
    code = str(paired["comparison_code"])
    console = Console()
    console.print(comparison_panel(code))
    typer.echo(f"Paired {device_id} with {link.gateway_url}; it works once the person confirms the code.")
    typer.echo(f"Wrote the state file {state}. Then: tapgate device run --state {state}")
    typer.echo(f"comparison code: {code}")


def gateway_http(url: str, trust: ssl.SSLContext | bool = True) -> httpx.AsyncClient:
    """The phone's HTTP client: its GETs (the long-polls) are sent once more when the connection dropped
    before any answer, as a stale keep-alive connection does (tapgate.dropped)."""
    return httpx.AsyncClient(
        base_url=url, timeout=TIMEOUT, transport=RetryDropped(httpx.AsyncHTTPTransport(verify=trust))
    )


def _connect_trusting(
    trust: ssl.SSLContext | bool,
) -> Callable[[str, Mapping[str, str]], AbstractAsyncContextManager[Link]]:
    def connect(url: str, headers: Mapping[str, str]) -> AbstractAsyncContextManager[Link]:
        # A closing link waits at most 2 s for the gateway's close frame: Ctrl-C should feel immediate.
        context = trust if url.startswith("wss:") and isinstance(trust, ssl.SSLContext) else None
        return websocket_connect(
            url,
            additional_headers=dict(headers),
            compression=None,
            open_timeout=10,
            close_timeout=2,
            ssl=context,
        )

    return connect


@device_app.command()
def run(
    state: StateOption = DEFAULT_STATE,
    auto: Annotated[
        Answer | None, typer.Option("--auto", help="Answer every call so, without asking (scripts, tests).")
    ] = None,
    handlers: Annotated[
        list[str] | None,
        typer.Option("--handlers", help="module or module:attr with @handler functions; repeat for more."),
    ] = None,
    approve: Annotated[
        ApproveMode, typer.Option("--approve", help="Approvals: ask, auto-approve or auto-deny.")
    ] = ApproveMode.ASK,
    inbox: Annotated[bool, typer.Option(help="Watch the inbox for approvals to sign.")] = True,
    ca_file: CaFileOption = None,
) -> None:
    """Serve calls and approvals until Ctrl-C; exit 1 if the gateway revokes the device."""
    phone_state = _state(state)
    key = _key(Path(phone_state.key_file))
    registry = Handlers()
    for spec in handlers or []:
        try:
            registry.add(load_handlers(spec))
        except HandlerError as e:
            _fail(str(e), 2)
    console = Console()
    ask = Ask(console)
    decide_call = always(auto) if auto is not None else ask.call
    decide_approval = {
        ApproveMode.ASK: ask.approval,
        ApproveMode.AUTO_APPROVE: always_decide(Decision.APPROVED),
        ApproveMode.AUTO_DENY: always_decide(Decision.DENIED),
    }[approve]

    trust = _trust(ca_file)
    _check_trusted(phone_state.gateway_url, trust)

    async def serve() -> tuple[bool, str]:
        async with gateway_http(phone_state.gateway_url, trust) as http:
            phone = Phone(
                http=http,
                device_id=phone_state.device_id,
                token=phone_state.token,
                key=key,
                connect=_connect_trusting(trust),
                decide_call=decide_call,
                decide_approval=decide_approval,
                screen=Screen(console),
                handlers=registry,
                watch_inbox=inbox,
                on_moved=lambda url: replace(phone_state, gateway_url=url).save(state),
            )
            with _ctrl_c_stops(phone):
                ending = await phone.run()
            return ending.revoked, ending.message

    names = ", ".join(sorted(registry)) or "none (calls are simulated)"
    console.print(
        f"Terminal phone [bold]{phone_state.device_id}[/bold] for {phone_state.gateway_url}; "
        f"handlers: {names}. Ctrl-C stops it.",
        soft_wrap=True,
        highlight=False,
    )
    try:
        revoked, message = asyncio.run(serve())
    except KeyboardInterrupt:  # a second Ctrl-C, or one where the loop cannot take signals
        console.print("Stopped.")
        raise typer.Exit(0) from None
    if revoked:
        _fail(message)
    console.print("Stopped.")


def _check_trusted(url: str, trust: ssl.SSLContext | bool) -> None:
    """Stop at once on a gateway whose certificate is not trusted: trying again would never help. Any
    other failure is left to the phone, which keeps trying."""
    if not url.startswith("https:"):
        return
    try:
        httpx.get(f"{url}/readyz", timeout=TIMEOUT, verify=trust)
    except httpx.TransportError as e:
        if untrusted_line(e) is not None:
            _fail(unreachable(url, e))


@contextlib.contextmanager
def _ctrl_c_stops(phone: Phone) -> Iterator[None]:
    """The first Ctrl-C asks the phone to stop through its own ``stop()``: a flag its run waits on, rather
    than a cancellation of the whole program that has to travel through every await on the way (once,
    under load, such a run was still going 30 s after Ctrl-C). A second Ctrl-C interrupts at once."""
    loop = asyncio.get_running_loop()
    pressed = 0

    def on_ctrl_c() -> None:
        nonlocal pressed
        pressed += 1
        if pressed > 1:
            raise KeyboardInterrupt
        phone.stop()

    try:
        loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
    except (NotImplementedError, RuntimeError):  # no signals for this loop: Ctrl-C cancels as before
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


@device_app.command()
def decide(
    words: Annotated[
        list[str], typer.Argument(help="APPROVAL_ID approved|denied; with --approval only the decision.")
    ],
    state: StateOption = DEFAULT_STATE,
    message: Annotated[str | None, typer.Option("--message", help="Your words to the agent.")] = None,
    not_me: Annotated[
        bool, typer.Option("--not-me", help="This wasn't me: deny, and pause the agent's requests.")
    ] = False,
    key_file: Annotated[Path | None, typer.Option("--key", help="Offline: the key file.")] = None,
    device_id: Annotated[str | None, typer.Option("--device-id", help="Offline: the device's id.")] = None,
    approval_file: Annotated[
        Path | None, typer.Option("--approval", help="Offline: an inbox item saved as JSON; print the body.")
    ] = None,
    ca_file: CaFileOption = None,
) -> None:
    """Sign a decision on an inbox item and post it, or print the body (offline).

    Online: APPROVAL_ID approved|denied, with the state file's key and token. Offline: --key, --device-id
    and --approval (an inbox item saved as JSON) with the decision print the body the phone would post."""
    offline = approval_file is not None
    if len(words) != (1 if offline else 2):
        _fail(
            "Pass APPROVAL_ID and approved|denied, or with --approval FILE (and --key, --device-id) only "
            "the decision.",
            2,
        )
    if words[-1] not in ("approved", "denied"):
        _fail(f"The decision must be 'approved' or 'denied', not {words[-1]!r}.", 2)
    decision = Decision(words[-1])
    if not_me and decision is not Decision.DENIED:
        _fail("--not-me goes with the decision denied.", 2)
    if offline:
        assert approval_file is not None
        if key_file is None or device_id is None:
            _fail("With --approval pass --key and --device-id too.", 2)
        try:
            approval = json.loads(approval_file.read_text())
        except (OSError, ValueError) as e:
            _fail(f"{approval_file} cannot be read as JSON: {e}.", 2)
        if not isinstance(approval, dict):
            _fail(f"{approval_file} must hold one approval, a JSON object as GET /v1/inbox shows it.", 2)
        typer.echo(json.dumps(_signed(_key(key_file), device_id, approval, decision, message, not_me)))
        return
    approval_id = words[0]
    phone_state = _state(state)
    key = _key(Path(phone_state.key_file))
    gateway, auth = phone_state.gateway_url, {"Authorization": f"Bearer {phone_state.token}"}
    r = _request("GET", f"{gateway}/v1/inbox", ca_file, headers=auth)
    if r.status_code != 200:
        _fail(f"The gateway did not show the inbox: {_error(r)}")
    found = [a for a in r.json().get("approvals", []) if isinstance(a, dict) and a.get("id") == approval_id]
    if not found:
        _fail(f"There is no pending approval {approval_id} in the inbox: decided, expired, or not yours.")
    body = _signed(key, phone_state.device_id, found[0], decision, message, not_me)
    r = _request("POST", f"{gateway}/v1/approvals/{approval_id}", ca_file, json=body, headers=auth)
    if r.status_code != 200:
        _fail(f"The gateway refused the decision: {_error(r)}")
    typer.echo(f"approval {approval_id}: {r.json()['status']} (signed by {phone_state.device_id})")


@device_app.command()
def login(
    url: Annotated[str, typer.Argument(help="The link the console's QR code carries (…/app/#console=…).")],
    state: StateOption = DEFAULT_STATE,
    yes: Annotated[bool, typer.Option("--yes", help="Approve without asking (for scripts).")] = False,
    ca_file: CaFileOption = None,
) -> None:
    """Sign in to the person's console: this device asks, shows the sign-in's code, and signs your yes."""
    fragment = url.partition("#")[2]
    sign_in = fragment.removeprefix("console=") if fragment.startswith("console=") else ""
    tenant_id, _, sign_in_id = sign_in.partition(".")
    if not tenant_id or not sign_in_id:
        _fail("That is not a console sign-in link: it ends in #console=TENANT.ID (the console shows it).", 2)
    phone_state = _state(state)
    key = _key(Path(phone_state.key_file))
    gateway, auth = phone_state.gateway_url, {"Authorization": f"Bearer {phone_state.token}"}
    r = _request("POST", f"{gateway}/v1/console/sign-ins/{sign_in_id}/ask", ca_file, headers=auth)
    if r.status_code != 201:
        _fail(f"The gateway did not open the sign-in: {_error(r)}")
    approval = r.json()
    typer.echo(approval.get("prompt", ""))
    for field in approval.get("preview", {}).get("fields", []):
        typer.echo(f"  {field.get('label')}: {field.get('value')}")
    approved = yes or typer.confirm("Sign in to the console with this code?", default=False)
    decision = Decision.APPROVED if approved else Decision.DENIED
    body = _signed(key, phone_state.device_id, approval, decision, None, False)
    r = _request("POST", f"{gateway}/v1/approvals/{approval['id']}", ca_file, json=body, headers=auth)
    if r.status_code != 200:
        _fail(f"The gateway refused the decision: {_error(r)}")
    typer.echo("Signed in: the console opens on its own." if approved else "Sign-in declined.")


def _signed(
    key: PrivateKey,
    device_id: str,
    approval: dict[str, Any],
    decision: Decision,
    message: str | None,
    not_me: bool,
) -> dict[str, Any]:
    try:
        return decision_body(key, device_id, approval, decision.value, message, not_me)
    except CannotSign as e:
        _fail(f"This approval cannot be signed: {e}.")


@vectors_app.command("check")
def vectors_check(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A vectors JSON file.")
    ],
) -> None:
    """Exit 0 only when every case verifies and reproduces its payload, under any format name."""
    try:
        doc = json.loads(file.read_bytes())
    except (OSError, ValueError) as e:
        _fail(f"{file}: not a JSON document ({e}).")
    try:
        count = check_vectors(doc)
    except VectorsError as e:
        _fail(f"{file}: {e}")
    typer.echo(f"{file}: all {count} cases verify and reproduce their payloads (format {doc.get('format')}).")
