"""The phone's run loop: receive calls and approvals, let the person (or a script) answer, report back.

One ``Phone`` runs four tasks on one event loop:

- the **link** keeps a WebSocket to ``/v1/device/connect`` open (``device:invoke`` and
  ``device:approval`` frames in, ``device:result`` frames out, each answered by a ``device:ack``;
  ``device:notice`` frames are shown as a line, once each, and ask nothing back; ``device:moved`` makes
  the phone remember the gateway's new address (``on_moved``) and link again there at once); when
  the WebSocket cannot be opened it long-polls ``GET /v1/device/invocations?wait=`` instead and tries the
  WebSocket again later; when the link drops it reconnects after an exponential, capped back-off;
- the **inbox** long-polls ``GET /v1/inbox?wait=`` for approvals while there is no WebSocket link (the
  link brings them live);
- two **workers**, one for calls and one for approvals, show each as a card and ask the decider (one card
  on screen at a time), carry out a call with its handler (or simulate it) and post the answer, or sign a
  decision with the device key and post it.

Everything the loop touches from outside is passed in (the HTTP client, the WebSocket connect function,
the deciders, the handlers, the screen, ``sleep`` and the clock), so tests drive it without a terminal.
``run`` returns how the phone ended: stopped (``stop()``), or revoked (the gateway removed the device).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, TypeVar

import httpx
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from tapgate import tasks as background
from tapgate.device.handlers import Handler
from tapgate.device.signing import CannotSign, decision_body
from tapgate.domain.approvals import Decision, PrivateKey
from tapgate.trust import untrusted

__all__ = [
    "REFUSED_MESSAGE",
    "REVOKED_MESSAGE",
    "Answer",
    "Backoff",
    "Call",
    "Connect",
    "Ending",
    "Link",
    "Phone",
    "PhoneScreen",
    "Request",
    "Verdict",
    "in_daemon_thread",
]

T = TypeVar("T")

REVOKED_MESSAGE = (
    "The gateway revoked this device: it was removed, so it can no longer act or sign. "
    "Pair it again to use it."
)
REFUSED_MESSAGE = (
    "The gateway does not accept this device's token: the device was removed, its pairing was declined, "
    "or the token is not one of this gateway's. Pair it again to use it."
)
UNAUTHORIZED_CLOSE = 4401
REVOKED_CLOSE = 4403
MESSAGE_MAX = 4000  # the gateway refuses a result message over 4,096 characters
_CONNECT_ERRORS = (OSError, TimeoutError, InvalidHandshake, InvalidURI)
_REMEMBERED = 2000  # call and approval ids kept to recognise a second delivery


class Link(Protocol):
    """An open WebSocket: what the phone needs of ``websockets``' client connection."""

    async def send(self, message: str) -> None: ...

    async def recv(self) -> str | bytes: ...


Connect = Callable[[str, Mapping[str, str]], AbstractAsyncContextManager[Link]]
"""Open a WebSocket to a URL with extra upgrade headers; raises OSError, TimeoutError or a websockets
handshake error when it cannot."""


class Answer(StrEnum):
    """What the person says to a call: carry it out (then done or failed), decline it, or fail it."""

    DONE = "done"
    DECLINED = "declined"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Call:
    """An invocation as the device receives it."""

    id: str
    tool: str
    capability: str
    arguments: Mapping[str, Any]
    summary: str | None = None
    expires_at: str | None = None
    binding_code: str | None = None

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> Call | None:
        """From a ``device:invoke`` frame (callId, input) or a long-poll item (id, arguments); None for
        anything malformed."""
        call_id = data.get("callId", data.get("id"))
        arguments = data.get("input", data.get("arguments", {}))
        tool, capability = data.get("tool"), data.get("capability")
        if not (isinstance(call_id, str) and call_id and isinstance(arguments, Mapping)):
            return None
        if not (isinstance(tool, str) and isinstance(capability, str)):
            return None
        return cls(
            call_id,
            tool,
            capability,
            arguments,
            _optional_text(data.get("summary")),
            _optional_text(data.get("expires_at")),
            _optional_text(data.get("binding_code")),
        )


def _text_of(preview: object, key: str) -> str:
    value = preview.get(key) if isinstance(preview, Mapping) else None
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class Request:
    """An approval waiting for the person, as ``GET /v1/inbox`` shows it; ``raw`` is what gets signed."""

    id: str
    kind: str
    subject: str
    prompt: str
    fields: tuple[tuple[str, str], ...]
    binding_code: str | None
    expires_at: str | None
    raw: Mapping[str, Any] = field(repr=False)
    title: str = ""  # what the person is asked for: the capability's label
    description: str = ""
    why: str = ""  # why the person is asked
    agent_asks: bool = False  # an agent's call waits on it: "this wasn't me" is offered

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> Request | None:
        approval_id, kind, subject = data.get("id"), data.get("kind"), data.get("subject")
        if not (isinstance(approval_id, str) and approval_id and isinstance(kind, str)):
            return None
        preview = data.get("preview")
        fields = preview.get("fields") if isinstance(preview, Mapping) else None
        shown = tuple(
            (str(f.get("label", "")), str(f.get("value", "")))
            for f in (fields if isinstance(fields, list) else [])
            if isinstance(f, Mapping)
        )
        return cls(
            approval_id,
            kind,
            subject if isinstance(subject, str) else "",
            str(data.get("prompt", "")),
            shown,
            _optional_text(data.get("binding_code")),
            _optional_text(data.get("expires_at")),
            data,
            _text_of(preview, "title"),
            _text_of(preview, "description"),
            _text_of(preview, "why"),
            data.get("agent_asks") is True,
        )


@dataclass(frozen=True, slots=True)
class Notice:
    """An agent's heads-up from a ``device:notice`` frame: an event, ids and flags, maybe its words."""

    id: str
    event: str
    title: str | None
    body: str | None
    data: Mapping[str, Any]

    @classmethod
    def read(cls, data: Mapping[str, Any]) -> Notice | None:
        notice_id, event, ids = data.get("id"), data.get("event"), data.get("data", {})
        if not (isinstance(notice_id, str) and notice_id and isinstance(event, str) and event):
            return None
        return cls(
            notice_id,
            event,
            _optional_text(data.get("title")),
            _optional_text(data.get("body")),
            ids if isinstance(ids, Mapping) else {},
        )

    def line(self) -> str:
        """One line for the screen: the event, the agent's words if any, then the ids."""
        words = ": ".join(w for w in (self.title, self.body) if w)
        ids = " ".join(f"{k}={v}" for k, v in sorted(self.data.items()))
        return " ".join(p for p in (f"notice {self.event}", words, f"({ids})" if ids else "") if p)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The person's decision on an approval; ``not_me`` says the request was not theirs (deny and pause
    the agent)."""

    decision: Decision
    message: str | None = None
    not_me: bool = False


CallDecider = Callable[[Call], Awaitable[Answer | None]]
ApprovalDecider = Callable[[Request], Awaitable[Verdict | None]]


@dataclass(frozen=True, slots=True)
class Backoff:
    """``base`` doubling per consecutive failure, never more than ``cap`` seconds; with ``rng``, each
    delay is drawn from its upper half, so phones that lost the same gateway do not return in step."""

    base: float = 0.5
    cap: float = 30.0
    rng: random.Random | None = None

    def delay(self, failures: int) -> float:
        full = min(self.cap, self.base * 2 ** max(0, failures - 1))
        return full if self.rng is None else self.rng.uniform(full / 2, full)


@dataclass(frozen=True, slots=True)
class Ending:
    revoked: bool
    message: str


class PhoneScreen(Protocol):
    """What the run loop shows; ``tapgate.device.cards.Screen`` draws it with rich."""

    def call(self, call: Call) -> None: ...

    def approval(self, request: Request) -> None: ...

    def answered(self, call: Call, status: str, message: str | None, outcome: str) -> None: ...

    def decided(self, request: Request, status: str, outcome: str) -> None: ...

    def note(self, text: str) -> None: ...


class Revoked(Exception):
    """The gateway no longer accepts the device's token."""


class _Unreachable(Exception):
    """The gateway did not answer, or answered with a server error."""


class _Recent:
    """A bounded set that forgets its oldest entries."""

    def __init__(self, size: int = _REMEMBERED) -> None:
        self._items: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def add(self, item: str) -> None:
        self._items[item] = None
        self._items.move_to_end(item)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def __contains__(self, item: object) -> bool:
        return item in self._items


def in_daemon_thread(function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run a blocking ``function`` (a prompt, a handler) in a daemon thread: the loop stays free, and a
    prompt nobody answers never keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def work() -> None:
        try:
            result = function(*args)
        except BaseException as e:  # handed to the awaiting task; an exit in a thread is an error there
            error = e if isinstance(e, Exception) else RuntimeError(f"{type(e).__name__}: {e}")
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody is waiting any more
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(
        target=work, name=f"tapgate-{getattr(function, '__name__', 'work')}", daemon=True
    ).start()
    return future


class Phone:
    """The terminal phone's core; see the module docstring."""

    def __init__(
        self,
        *,
        http: httpx.AsyncClient,
        device_id: str,
        token: str,
        key: PrivateKey,
        connect: Connect,
        decide_call: CallDecider,
        decide_approval: ApprovalDecider,
        screen: PhoneScreen,
        handlers: Mapping[str, Handler] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        watch_inbox: bool = True,
        poll_wait: float = 25.0,
        poll_seconds: float = 2.0,
        websocket_retry_seconds: float = 60.0,
        stable_seconds: float = 10.0,
        on_moved: Callable[[str], None] | None = None,
    ) -> None:
        self._http = http
        self._on_moved = on_moved
        self.device_id = device_id
        self._auth = {"Authorization": f"Bearer {token}"}
        self._key = key
        self._connect = connect
        self._decide_call = decide_call
        self._decide_approval = decide_approval
        self._screen = screen
        self._handlers: Mapping[str, Handler] = handlers or {}
        self._sleep = sleep
        self._clock = clock
        self._backoff = backoff or Backoff(rng=random.Random())
        self._watch_inbox = watch_inbox
        self._poll_wait = poll_wait
        self._poll_seconds = poll_seconds
        self._websocket_retry = websocket_retry_seconds
        self._stable = stable_seconds
        self._calls: asyncio.Queue[Call] = asyncio.Queue()
        self._requests: asyncio.Queue[Request] = asyncio.Queue()
        self._held: set[str] = set()  # calls queued or being answered
        self._finished = _Recent()  # calls whose answer the gateway confirmed
        self._unconfirmed: OrderedDict[str, tuple[str, str | None]] = OrderedDict()  # sent over the link
        self._seen_requests = _Recent()
        self._seen_notices = _Recent()  # a notice a link sent again (its mark was lost) shows once
        self._link: Link | None = None
        # Set once the phone is off the WebSocket (long-polling, or between links): the inbox long-polls
        # then; on a link, approvals arrive as device:approval frames.
        self._unlinked = asyncio.Event()
        self._mode = ""
        self._waiting_for_consent = False
        self._turn = asyncio.Lock()  # one card and its question on screen at a time
        self._calls_settled = asyncio.Event()  # a worker finished a call
        self._requests_settled = asyncio.Event()  # a worker finished an approval
        self._stopped = asyncio.Event()

    @property
    def websocket_url(self) -> str:
        base = str(self._http.base_url).rstrip("/")
        return "ws" + base.removeprefix("http") + "/v1/device/connect"

    def stop(self) -> None:
        """End ``run`` cleanly."""
        self._stopped.set()

    async def run(self) -> Ending:
        """Serve until ``stop()`` or until the gateway revokes the device. Returns how it ended."""
        jobs = [self._links(), self._answer_calls(), self._answer_requests()]
        if self._watch_inbox:
            jobs.append(self._inbox())
        tasks = [asyncio.create_task(job) for job in jobs]
        stopped = asyncio.create_task(self._stopped.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopped], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*tasks, stopped):
                task.cancel()  # all at once: a link that closes must not wake the inbox poll first
            for task in (*tasks, stopped):
                await background.stop(task)  # asked again until it ends: a cancel can be swallowed
        for task in done:
            if task is stopped or task.cancelled():
                continue
            error = task.exception()
            if isinstance(error, Revoked):
                return Ending(True, str(error))
            if error is not None:
                raise error
        return Ending(False, "stopped")

    # the link: WebSocket first, long-poll when it cannot connect

    async def _links(self) -> None:
        failures = 0
        websocket_after = 0.0
        while True:
            if self._waiting_for_consent and await self._awaiting_consent():
                await self._sleep(self._poll_seconds)
                continue
            cannot: str | None = None
            if self._clock() >= websocket_after:
                try:
                    opened_at, pending = await self._websocket()
                except _CannotConnect as e:
                    cannot = str(e)
                except _Moved:
                    failures = 0
                    continue
                else:
                    if pending:
                        await self._sleep(self._poll_seconds)
                        continue
                    failures = 1 if self._clock() - opened_at >= self._stable else failures + 1
                    delay = self._backoff.delay(failures)
                    self._screen.note(f"The link dropped; reconnecting in {delay:.1f} s.")
                    await self._sleep(delay)
                    continue
            if cannot is not None and self._mode != "long-poll":
                self._screen.note(f"The WebSocket cannot connect ({cannot}); long-polling instead.")
            self._mode = "long-poll"
            self._unlinked.set()
            try:
                await self._poll_once()
            except _Unreachable as e:
                failures += 1
                delay = self._backoff.delay(failures)
                self._screen.note(f"The gateway cannot be reached ({e}); trying again in {delay:.1f} s.")
                await self._sleep(delay)
                continue
            failures = 0
            if cannot is not None:
                websocket_after = self._clock() + self._websocket_retry

    async def _websocket(self) -> tuple[float, bool]:
        """Serve one WebSocket link until it ends. Returns when it opened and whether the device still
        waits for the person's consent. Raises _CannotConnect, Revoked."""
        async with contextlib.AsyncExitStack() as stack:
            try:
                link = await stack.enter_async_context(self._connect(self.websocket_url, self._auth))
            except _CONNECT_ERRORS as e:
                raise _CannotConnect(_describe(e)) from e
            opened_at = self._clock()
            self._link = link
            try:
                # The gateway accepts every upgrade and refuses a bad token after it: ask before saying
                # the link is up (401 raises Revoked, 403 is a pairing awaiting consent).
                if await self._awaiting_consent():
                    return opened_at, True
                if self._mode != "websocket":
                    self._screen.note("Connected over the WebSocket.")
                self._mode = "websocket"
                self._unlinked.clear()
                await self._serve(link)
            except ConnectionClosed as e:
                code = e.rcvd.code if e.rcvd is not None else None
                if code == REVOKED_CLOSE:
                    raise Revoked(REVOKED_MESSAGE) from None
                if code == UNAUTHORIZED_CLOSE:
                    self._mode = ""
                    return opened_at, await self._awaiting_consent()
            finally:
                self._link = None
                self._unlinked.set()
        return opened_at, False

    async def _serve(self, link: Link) -> None:
        while True:
            raw = await link.recv()
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(frame, dict):
                continue
            kind = frame.get("type")
            if kind == "device:invoke":
                call = Call.read(frame)
                if call is not None:
                    self._offer(call)
            elif kind == "device:approval":
                approval = frame.get("approval")
                request = Request.read(approval) if isinstance(approval, Mapping) else None
                if request is not None:
                    self._offer_request(request)
            elif kind == "device:notice":
                body = frame.get("notice")
                notice = Notice.read(body) if isinstance(body, Mapping) else None
                if notice is not None and notice.id not in self._seen_notices:
                    self._seen_notices.add(notice.id)
                    self._screen.note(notice.line())
            elif kind == "device:revoked":
                raise Revoked(REVOKED_MESSAGE)
            elif kind == "device:moved":
                self._follow(frame.get("url"))
            elif kind == "device:ack":
                self._acknowledged(frame)
            elif kind == "device:error":  # a gateway from before device:ack
                self._link_error(frame)

    def _follow(self, url: object) -> None:
        """The gateway moved: remember its new address and link there. Raises _Moved (the link ends);
        an address that is no http(s) URL, or the one in use, is ignored."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return
        url = url.rstrip("/")
        if url == str(self._http.base_url).rstrip("/"):
            return
        self._http.base_url = httpx.URL(url)
        if self._on_moved is not None:
            self._on_moved(url)
        self._screen.note(f"The gateway moved to {url}; linking there.")
        self._mode = ""  # the next link says where it is
        raise _Moved

    def _acknowledged(self, frame: Mapping[str, Any]) -> None:
        """The gateway says what became of an answer sent over the link; only ``accepted`` is silent."""
        if frame.get("status") == "accepted":
            call_id = str(frame.get("callId", ""))
            self._unconfirmed.pop(call_id, None)
            self._finished.add(call_id)
        else:
            self._link_error(frame)

    def _link_error(self, frame: Mapping[str, Any]) -> None:
        call_id = str(frame.get("callId", ""))
        self._unconfirmed.pop(call_id, None)
        self._finished.add(call_id)
        self._screen.note(f"The gateway did not take the answer to {call_id}: {frame.get('message', '')}")

    def _offer_request(self, request: Request) -> bool:
        """Queue an approval unless it was shown already; True if queued."""
        if request.id in self._seen_requests:
            return False
        self._seen_requests.add(request.id)
        self._requests.put_nowait(request)
        return True

    async def _awaiting_consent(self) -> bool:
        """After the link refused the token: True while the pairing waits for consent. Raises Revoked."""
        try:
            r = await self._http.post("/v1/device/heartbeat", headers=self._auth)
        except httpx.TransportError:
            return False
        return await self._standing(r)

    async def _standing(self, r: httpx.Response) -> bool:
        """True when ``r`` says the device waits for consent (403); raises Revoked on 401."""
        if r.status_code == 401:
            raise Revoked(REFUSED_MESSAGE)
        if r.status_code == 403:
            if not self._waiting_for_consent:
                self._screen.note("Waiting for the person to confirm the pairing with the comparison code.")
            self._waiting_for_consent = True
            return True
        self._waiting_for_consent = False
        return False

    async def _poll_once(self) -> None:
        """One long-poll round. Raises _Unreachable, Revoked."""
        timeout = httpx.Timeout(10.0, read=self._poll_wait + 10.0)
        self._calls_settled.clear()
        try:
            r = await self._http.get(
                "/v1/device/invocations",
                params={"wait": self._poll_wait},
                headers=self._auth,
                timeout=timeout,
            )
        except httpx.TransportError as e:
            raise _Unreachable(_describe(e)) from None
        if await self._standing(r):
            await self._sleep(self._poll_seconds)
            return
        if r.status_code != 200:
            raise _Unreachable(f"HTTP {r.status_code} on GET /v1/device/invocations")
        items = _items(r, "invocations")
        calls = [c for c in (Call.read(i) for i in items) if c is not None]
        offered = [self._offer(c) for c in calls]
        if items and not any(offered):
            await self._until_settled(self._calls_settled)

    def _offer(self, call: Call) -> bool:
        """Queue a call unless it is in hand or answered; True if queued."""
        if call.id in self._held or (call.id in self._finished and call.id not in self._unconfirmed):
            return False
        self._held.add(call.id)
        self._calls.put_nowait(call)
        return True

    # the inbox

    async def _inbox(self) -> None:
        failures = 0
        timeout = httpx.Timeout(10.0, read=self._poll_wait + 10.0)
        while True:
            await self._unlinked.wait()  # on a WebSocket link, approvals arrive as device:approval
            self._requests_settled.clear()
            try:
                r = await self._http.get(
                    "/v1/inbox", params={"wait": self._poll_wait}, headers=self._auth, timeout=timeout
                )
            except httpx.TransportError:
                r = None
            if r is not None and await self._standing(r):
                await self._sleep(self._poll_seconds)
                continue
            if r is None or r.status_code != 200:
                failures += 1
                await self._sleep(self._backoff.delay(failures))
                continue
            failures = 0
            items = _items(r, "approvals")
            fresh = 0
            for item in items:
                request = Request.read(item)
                if request is not None and self._offer_request(request):
                    fresh += 1
            if items and not fresh:
                await self._until_settled(self._requests_settled)

    async def _until_settled(self, settled: asyncio.Event) -> None:
        """Wait until a worker finishes a card, or ``poll_seconds``. A long-poll returns at once while
        anything is pending, including cards in hand, so asking again before either would spin."""
        waits = [
            asyncio.ensure_future(settled.wait()),
            asyncio.ensure_future(self._sleep(self._poll_seconds)),
        ]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    # the workers

    async def _answer_calls(self) -> None:
        while True:
            call = await self._calls.get()
            try:
                await self._answer_call(call)
            finally:
                self._held.discard(call.id)
                self._calls_settled.set()

    async def _answer_call(self, call: Call) -> None:
        earlier = self._unconfirmed.pop(call.id, None)
        if earlier is not None:  # answered over a link that dropped: say it again, over HTTP
            await self._post_result(call, *earlier)
            return
        async with self._turn:
            self._screen.call(call)
            answer = await self._decide_call(call)
        if answer is None:
            self._finished.add(call.id)
            self._screen.answered(call, "unanswered", None, "left to expire: nobody answered it here")
            return
        if answer is Answer.DONE:
            status, message = await self._carry_out(call)
        elif answer is Answer.DECLINED:
            status, message = "declined", None
        else:
            status, message = "failed", "the person marked it failed on the device"
        await self._answer(call, status, message)

    async def _carry_out(self, call: Call) -> tuple[str, str | None]:
        run = self._handlers.get(call.capability)
        if run is None:
            return "done", f"simulated: this terminal phone has no handler for {call.capability}"
        try:
            said = await in_daemon_thread(run, dict(call.arguments))
        except Exception as e:
            return "failed", _said(str(e).strip() or type(e).__name__)
        if said is None:
            return "done", None
        return "done", _said(said if isinstance(said, str) else json.dumps(said, default=str))

    async def _answer(self, call: Call, status: str, message: str | None) -> None:
        link = self._link
        if link is not None:
            frame: dict[str, Any] = {"type": "device:result", "callId": call.id, "status": status}
            if message is not None:
                frame["message"] = message
            try:
                await link.send(json.dumps(frame))
            except ConnectionClosed:
                pass
            else:
                self._unconfirmed_answer(call, status, message)
                self._screen.answered(call, status, message, "sent over the WebSocket")
                return
        await self._post_result(call, status, message)

    def _unconfirmed_answer(self, call: Call, status: str, message: str | None) -> None:
        """Keep an answer the gateway has not confirmed: if the call is listed again, it goes again."""
        self._unconfirmed[call.id] = (status, message)
        while len(self._unconfirmed) > _REMEMBERED:
            self._unconfirmed.popitem(last=False)
        self._finished.add(call.id)

    async def _post_result(self, call: Call, status: str, message: str | None) -> None:
        body: dict[str, Any] = {"status": status} | ({"message": message} if message is not None else {})
        for attempt in range(1, 6):
            try:
                r = await self._http.post(
                    f"/v1/device/invocations/{call.id}/result", json=body, headers=self._auth
                )
            except httpx.TransportError:
                await self._sleep(self._backoff.delay(attempt))
                continue
            if r.status_code == 401:
                raise Revoked(REFUSED_MESSAGE)
            if r.status_code >= 500:
                await self._sleep(self._backoff.delay(attempt))
                continue
            self._finished.add(call.id)
            self._screen.answered(call, status, message, _result_outcome(r))
            return
        self._unconfirmed_answer(call, status, message)
        self._screen.answered(call, status, message, "not delivered yet: the gateway cannot be reached")

    async def _answer_requests(self) -> None:
        while True:
            request = await self._requests.get()
            async with self._turn:
                self._screen.approval(request)
                verdict = await self._decide_approval(request)
            if verdict is None:
                self._screen.decided(request, "undecided", "left for another device or a later decision")
            else:
                await self._post_decision(request, verdict)
            self._requests_settled.set()

    async def _post_decision(self, request: Request, verdict: Verdict) -> None:
        try:
            body = decision_body(
                self._key, self.device_id, request.raw, verdict.decision, verdict.message, verdict.not_me
            )
        except CannotSign as e:
            self._screen.decided(request, "unsigned", f"this key cannot sign it: {e}")
            return
        try:
            r = await self._http.post(f"/v1/approvals/{request.id}", json=body, headers=self._auth)
        except httpx.TransportError as e:
            self._screen.decided(request, "unsent", f"the gateway cannot be reached ({_describe(e)})")
            return
        if r.status_code == 401:
            raise Revoked(REFUSED_MESSAGE)
        if r.status_code == 200:
            self._screen.decided(request, str(r.json().get("status")), f"signed by {self.device_id}")
            return
        outcome = {
            409: "decided already, on another device",
            410: "too late: its window has passed",
            404: "it is no longer there",
        }.get(r.status_code, f"refused ({r.status_code}): {_error_message(r)}")
        self._screen.decided(request, verdict.decision.value, outcome)


class _CannotConnect(Exception):
    pass


class _Moved(Exception):
    """The gateway sent ``device:moved``: link again at the new address."""


def _optional_text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _items(r: httpx.Response, key: str) -> list[Mapping[str, Any]]:
    try:
        data = r.json()
    except ValueError:
        return []
    items = data.get(key) if isinstance(data, dict) else None
    return [i for i in items if isinstance(i, Mapping)] if isinstance(items, list) else []


def _said(text: str) -> str:
    """One line for the agent: whitespace runs collapsed, at most MESSAGE_MAX characters."""
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_MAX else line[: MESSAGE_MAX - 1] + "…"


def _describe(error: BaseException) -> str:
    sentence = untrusted(error)
    if sentence is not None:
        return sentence
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _error_message(r: httpx.Response) -> str:
    try:
        error = r.json().get("error", {})
        return str(error.get("message", "")) or r.text[:200]
    except (ValueError, AttributeError):
        return r.text[:200]


def _result_outcome(r: httpx.Response) -> str:
    if r.status_code == 200:
        return "accepted"
    if r.status_code == 409:
        try:
            first = r.json().get("first", {}).get("status", "?")
        except (ValueError, AttributeError):
            first = "?"
        return f"answered already: the first answer ({first}) stands"
    if r.status_code == 410:
        return "too late: the call had expired; the gateway keeps this answer as a late report"
    if r.status_code == 404:
        return "not this device's call (or no longer there)"
    return f"refused ({r.status_code}): {_error_message(r)}"
