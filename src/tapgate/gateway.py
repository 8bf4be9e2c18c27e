"""The one object the HTTP API, the MCP server and the CLI call."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from tapgate.domain.accounts import ListedToken, User
from tapgate.domain.audit import AuditEntry
from tapgate.domain.console import ConsoleSession, SignIn, SignInKind, SignInStarts
from tapgate.domain.devices import Device
from tapgate.domain.errors import InvalidInput, Unauthenticated
from tapgate.domain.events import Event
from tapgate.domain.frames import DeviceResult
from tapgate.domain.inbox import Approval
from tapgate.domain.invocations import Invocation
from tapgate.domain.mandates import Mandate
from tapgate.domain.pairing import Pairing
from tapgate.domain.passkeys import Passkey, Relying
from tapgate.domain.policy import PolicySet
from tapgate.domain.principals import Principal, Scope, TokenKind
from tapgate.domain.sessions import Session
from tapgate.domain.tools import ToolFormat
from tapgate.ports import Clock, PushSender, Store, Wake
from tapgate.services import (
    accounts,
    answering,
    approving,
    console,
    devices,
    events,
    ingesting,
    invoking,
    journal,
    linking,
    mandates,
    moving,
    notices,
    pairings,
    passkeys,
    proofs,
    sessions,
    tokens,
    tools,
)
from tapgate.services.answering import Answered
from tapgate.services.approving import DecisionBody
from tapgate.services.authcache import AuthCache
from tapgate.services.context import Context, Limits
from tapgate.services.devices import DeviceCaller, NewDevice
from tapgate.services.expiry import Sweeper, sweep
from tapgate.services.handed import HandedCalls
from tapgate.services.ingesting import Ingested
from tapgate.services.invoking import Call, View
from tapgate.services.links import LiveLinks
from tapgate.services.outbox import PushStats
from tapgate.services.pairings import Claimed
from tapgate.services.policy_explain import Explained, explain_call
from tapgate.services.policy_reload import PolicyReloader
from tapgate.services.push_worker import PushWorker
from tapgate.services.retention import Pruned, RetentionSweeper, prune
from tapgate.services.token_watch import TokenWatch
from tapgate.services.usage import UsageRecorder


class Background(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


class Gateway:
    """Use cases behind every edge. Each method is one transaction (or a read) and raises TapgateError.

    A method that takes a caller first states which token kinds and scope it needs (``caller.require``),
    so the HTTP API, the MCP server and the CLI share one authorization rule per use case.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock,
        wake: Wake,
        limits: Limits | None = None,
        device_channel: bool = False,
        public_url: str = "http://127.0.0.1:8080",
        policies: PolicySet | None = None,
        background: Sequence[Background] = (),
        sweep_seconds: float = 1.0,
        push: PushSender | None = None,
        policies_file: str = "",
        reload_on_sighup: bool = False,
    ) -> None:
        """``push`` sends the outbox's rows; with the device channel off no worker runs (gate G12).
        ``policies_file`` (the file ``policies`` came from) is watched and reloaded when it changes, and
        on SIGHUP with ``reload_on_sighup``."""
        self.ctx = Context(store, clock, wake, limits or Limits(), policies or PolicySet(), device_channel)
        self.public_url = public_url
        self._moved: dict[str, bool] = {}  # per tenant: whether `serve --move` moved it (moving.moved_to)
        self._auth = AuthCache(lambda: clock.now().timestamp())
        wake.listen(self._auth.on_notify)
        self._usage = UsageRecorder(store, clock)
        self._retention = RetentionSweeper(self.ctx)
        self._background = list(background)
        self.policy_reloader = (
            PolicyReloader(self.ctx, policies_file, sighup=reload_on_sighup) if policies_file else None
        )
        if self.policy_reloader is not None:
            self._background.append(self.policy_reloader)
        self._sweeper = Sweeper(self.ctx, sweep_seconds)
        self._sign_in_starts = SignInStarts(self.ctx.limits.console_sign_ins_per_address)
        self.links = LiveLinks(self.ctx)  # the device links this process holds, renewed in batches
        self.verified = journal.VerifiedMarks()  # how far each tenant's chain is verified, for the console
        self.hands = HandedCalls(self.ctx)  # when the long-poll handed each call, written in batches
        self._pusher = PushWorker(self.ctx, push) if device_channel and push is not None else None
        # Every background worker, each started and closed the same way; those after ``_always`` run
        # only with the device channel on.
        self._workers: list[Background] = [*self._background, self._usage]
        self._always = len(self._workers)
        self._workers += [self._sweeper, self._retention, self.links, self.hands]
        if self._pusher is not None:
            self._workers.append(self._pusher)

    @property
    def store(self) -> Store:
        return self.ctx.store

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    @property
    def limits(self) -> Limits:
        return self.ctx.limits

    @property
    def device_channel(self) -> bool:
        return self.ctx.device_channel

    @property
    def push_stats(self) -> PushStats | None:
        """What this process's push worker did (None: no worker runs here)."""
        return self._pusher.stats if self._pusher else None

    async def start(self) -> None:
        """Start the process's background work: notifications from other processes, the expiry sweep,
        the push worker."""
        for worker in self._workers if self.device_channel else self._workers[: self._always]:
            await worker.start()

    async def close(self) -> None:
        """Stop the background work, the last started first, then close the store. A worker closes
        whether or not it was started: token uses and handed calls noted meanwhile are written then."""
        for worker in reversed(self._workers):
            await worker.close()
        await self.store.close()

    async def ready(self) -> None:
        await self.store.ping()

    # tenants, users, tokens

    async def create_tenant(self, name: str) -> accounts.NewToken:
        return await accounts.create_tenant(self.store, self.clock, name)

    async def create_operator_token(
        self, tenant_id: str, expires_in_seconds: int | None = None
    ) -> accounts.NewToken:
        return await accounts.create_operator_token(self.store, self.clock, tenant_id, expires_in_seconds)

    async def authenticate(self, token: str) -> Principal:
        cached = None if self.ctx.wake.degraded else self._auth.principal(token)
        since = self._auth.epoch()
        principal = cached if cached is not None else await accounts.authenticate(self.store, token)
        if principal.expired(self.clock.now()):
            raise Unauthenticated("The bearer token has expired; ask for a new one.")
        if cached is None:
            self._auth.keep(token, principal, since=since)
        self._usage.seen(principal)
        return principal

    def watch_token(self, token: str, lapsed: Callable[[], None]) -> TokenWatch:
        """Call ``lapsed`` once ``token`` is revoked (in any process) or expires, while the watch is open
        (``async with``); requests that hold it end then."""
        return TokenWatch(self.ctx, self.authenticate, token, lapsed)

    async def list_user_tokens(self, caller: Principal, user_id: str) -> Sequence[ListedToken]:
        """The user's live tokens and console sessions (kind ``console_session``)."""
        caller.require(TokenKind.OPERATOR, TokenKind.USER)
        await self._usage.flush()
        return await tokens.list_for_user(self.store, self.clock, caller, user_id)

    async def list_tokens(self, caller: Principal, kind: str | None) -> Sequence[ListedToken]:
        """The tenant's live tokens and console sessions of ``kind`` (every kind when None)."""
        caller.require(TokenKind.OPERATOR)
        await self._usage.flush()
        return await tokens.list_for_tenant(self.store, self.clock, caller, kind)

    async def revoke_token(self, caller: Principal, token_id: str) -> None:
        """Revoke a token or a console session by its listed id. Raises NotFound, Conflict."""
        caller.require(TokenKind.OPERATOR, TokenKind.USER)
        await tokens.revoke(self.store, self.clock, caller, token_id)

    async def create_user(self, caller: Principal, user_id: str, display_name: str | None) -> User:
        caller.require(TokenKind.OPERATOR)
        return await accounts.create_user(self.store, self.clock, caller, user_id, display_name)

    async def list_users(self, caller: Principal) -> Sequence[User]:
        caller.require(TokenKind.OPERATOR)
        return await accounts.list_users(self.store, caller)

    async def create_token(
        self,
        caller: Principal,
        user_id: str,
        kind: TokenKind,
        scopes: Iterable[str] | None = None,
        agent_id: str | None = None,
        require_device_signature: bool | None = None,
        expires_in_seconds: int | None = None,
        agent_name: str | None = None,
    ) -> accounts.NewToken:
        caller.require(TokenKind.OPERATOR)
        return await accounts.create_token(
            self.store,
            self.clock,
            caller,
            user_id,
            kind,
            scopes,
            agent_id,
            require_device_signature,
            expires_in_seconds,
            agent_name=agent_name,
        )

    # policy

    async def explain_policy(
        self,
        tenant_id: str,
        user_id: str,
        tool: str,
        origin: str = "owner",
        session_kind: str = "",
        agent_id: str = "",
    ) -> Explained:
        """The verdict the rules in force give a call, and why, read from the live database; writes
        nothing. For the operator's command line (``tapgate policy explain``)."""
        return await explain_call(self.ctx, tenant_id, user_id, tool, origin, session_kind, agent_id)

    # the audit journal

    async def audit(self, caller: Principal, after: int, limit: int) -> Sequence[AuditEntry]:
        caller.require(TokenKind.OPERATOR)
        return await journal.read_audit(self.store, caller.tenant_id, after, limit)

    async def verify_audit(self, tenant_id: str | None = None) -> dict[str, int]:
        """Entry counts per verified tenant; raises BrokenChain at the first bad entry."""
        tenants = [tenant_id] if tenant_id else list(await self.store.tenant_ids())
        return {t: await journal.verify_audit(self.store, t) for t in tenants}

    async def verify_audit_since(self, tenant_id: str) -> int:
        """The tenant's entry count, checking only the entries after the last this process verified;
        raises BrokenChain at the first bad one."""
        return await self.verified.verify(self.store, tenant_id)

    # devices

    async def enrol_device(self, caller: Principal, user_id: str, body: Mapping[str, Any]) -> NewDevice:
        caller.require(TokenKind.OPERATOR)
        return await devices.enrol(
            self.store, self.clock, caller, user_id, body, self.limits.max_devices_per_user
        )

    async def list_devices(self, caller: Principal, user_id: str) -> list[Device]:
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_READ)
        return await devices.list_devices(self.store, self.clock, caller, user_id)

    async def set_grants(self, caller: Principal, user_id: str, device_id: str, grants: object) -> Device:
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_WRITE)
        return await devices.set_grants(self.store, self.clock, caller, user_id, device_id, grants)

    async def revoke_device(self, caller: Principal, user_id: str, device_id: str) -> None:
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_WRITE)
        await devices.revoke(self.store, self.clock, caller, user_id, device_id)

    async def authenticate_device(self, token: str, present: bool = True) -> DeviceCaller:
        """Revalidate the device behind a device token on every request, and mark it present (a link
        that opens passes ``present=False``: its hold marks it, in one write).

        A device revalidated moments ago is taken from the cache, which forgets it the moment its
        tenant's devices change (in any process), so a revoked device still fails its next request."""
        cached = None if self.ctx.wake.degraded else self._auth.device(token)
        if cached is not None:
            self._usage.seen(cached.principal)
            return cached
        since = self._auth.epoch()
        principal = await self.authenticate(token)
        caller = await devices.authenticate_device(self.store, self.clock, principal, present)
        self._auth.keep(token, principal, caller, since=since)
        return caller

    async def heartbeat(self, caller: DeviceCaller) -> None:
        """Mark the device present now (other requests mark it at most every half minute)."""
        await devices.touch(self.store, self.clock, caller)

    async def redeclare_capabilities(self, caller: DeviceCaller, entries: object) -> devices.Redeclared:
        devices.require_device_scope(caller, Scope.DEVICE_WRITE)
        window = self.ctx.limits.approval_sign_ttl_seconds
        return await devices.redeclare_capabilities(self.store, self.clock, caller, entries, window)

    # pairing

    async def start_pairing(self, caller: Principal, user_id: str) -> tuple[Pairing, str]:
        """A new pairing and the link its QR code carries."""
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_WRITE)
        pairing = await pairings.start(self.store, self.clock, caller, user_id)
        assert pairing.code is not None
        return pairing, pairings.pairing_url(self.public_url, pairing.code)

    async def pairing(self, caller: Principal, pairing_id: str) -> tuple[Pairing, Device | None]:
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_READ)
        return await pairings.get(self.store, self.clock, caller, pairing_id)

    async def pairing_link(self, caller: Principal, pairing_id: str) -> str:
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_WRITE)
        code = await pairings.open_code(self.store, self.clock, caller, pairing_id)
        return pairings.pairing_url(self.public_url, code)

    async def claim_pairing(self, body: Mapping[str, Any]) -> Claimed:
        return await pairings.claim_code(self.store, self.clock, body, self.limits.max_devices_per_user)

    async def consent_pairing(
        self, caller: Principal, pairing_id: str, comparison_code: str, approved: bool, grants: object
    ) -> Device:
        caller.require(TokenKind.OPERATOR, TokenKind.USER, scope=Scope.DEVICE_WRITE)
        return await pairings.decide(
            self.store,
            self.clock,
            caller,
            pairing_id,
            comparison_code,
            approved,
            grants,
            self.limits.require_device_signature,
        )

    # sessions and tools

    async def put_session(self, caller: Principal, session_id: str, kind: str, attended: bool) -> Session:
        return await sessions.put(self.store, self.clock, caller, session_id, kind, attended)

    async def record_message(
        self, caller: Principal, session_id: str, device_id: str | None, capabilities: Sequence[str]
    ) -> Session:
        return await sessions.record_message(
            self.store, self.clock, caller, session_id, device_id, capabilities
        )

    async def tools(
        self, caller: Principal, session_id: str | None = None, format: ToolFormat = ToolFormat.OPENAI
    ) -> list[dict[str, Any]]:
        return await tools.list_tools(self.store, caller, session_id, format, self.device_channel)

    def tool_changes(
        self, caller: Principal, session_id: str | None = None, format: ToolFormat = ToolFormat.MCP
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The caller's tool list now, then each time it changes (grants, devices, capabilities, the
        session's phone); what the MCP server turns into ``notifications/tools/list_changed``."""
        caller.require(TokenKind.AGENT, scope=Scope.TOOLS)
        return tools.changes(self.ctx, caller, session_id, format)

    # invocations

    async def invoke(self, caller: Principal, call: Call, wait: float = 0) -> View:
        return await invoking.invoke(self.ctx, caller, call, wait)

    async def invocation(self, caller: Principal, invocation_id: str, wait: float = 0) -> View:
        return await invoking.result(self.ctx, caller, invocation_id, wait)

    # standing mandates

    async def request_mandate(self, caller: Principal, body: Mapping[str, Any]) -> Mandate:
        return await mandates.request(self.ctx, caller, body)

    async def list_mandates(self, caller: Principal, user_id: str | None = None) -> Sequence[Mandate]:
        return await mandates.listed(self.ctx, caller, user_id)

    async def mandate(self, caller: Principal, mandate_id: str) -> Mandate:
        return await mandates.one(self.ctx, caller, mandate_id)

    async def revoke_mandate(self, caller: Principal, mandate_id: str) -> Mandate:
        return await mandates.revoke(self.ctx, caller, mandate_id)

    # proofs anyone can check offline

    async def approval_proof(self, caller: Principal, approval_id: str, disclose: bool = True) -> str:
        return await proofs.for_approval(self.ctx, self.public_url, caller, approval_id, disclose)

    async def mandate_proof(self, caller: Principal, mandate_id: str) -> str:
        return await proofs.for_mandate(self.ctx, self.public_url, caller, mandate_id)

    async def invocation_proof(
        self, caller: Principal, invocation_id: str, disclose: bool = True, user_id: str | None = None
    ) -> str:
        return await proofs.for_invocation(
            self.ctx, self.public_url, caller, invocation_id, disclose, user_id
        )

    async def issuer_keys(self) -> dict[str, list[dict[str, Any]]]:
        """The public issuer keys of every tenant, as a JWK Set."""
        return await proofs.published(self.store)

    async def rotate_issuer_key(self, tenant_id: str) -> str:
        """A new issuer key for the tenant; returns its kid."""
        return (await proofs.rotate(self.ctx, tenant_id)).kid

    async def device_pending(self, caller: DeviceCaller, wait: float = 0) -> Sequence[Invocation]:
        devices.require_device_scope(caller, Scope.DEVICE_READ)
        held = self.links.held(caller.principal.tenant_id, caller.device.device_uid)
        return await answering.pending(self.ctx, caller, self.hands, wait, held)

    async def device_answer(
        self, caller: DeviceCaller, invocation_id: str, status: str, message: str | None
    ) -> Answered:
        devices.require_device_scope(caller, Scope.DEVICE_WRITE)
        return await answering.answer(self.ctx, caller, invocation_id, status, message)

    async def sweep(self) -> int:
        """Expire every overdue invocation now (the background sweep does this on its own)."""
        return await sweep(self.ctx)

    async def sweep_sign_ins(self) -> int:
        """Delete the expired console sign-ins now (the background sweep does this every minute)."""
        return await console.sweep_sign_ins(self.ctx)

    async def prune(self) -> Pruned:
        """Erase the message bodies older than retention_days now (a background sweep does it hourly)."""
        return await prune(self.ctx)

    async def send_pushes(self) -> None:
        """Send every push due now and wait until each is recorded (the push worker does this on its
        own, woken by each commit)."""
        if self._pusher is not None:
            await self._pusher.run_once()

    # notices

    async def notice(
        self,
        caller: Principal,
        event: str,
        user_id: str | None = None,
        data: object = None,
        ui: object = None,
    ) -> list[str]:
        """Queue a notice for each of the user's devices that has a push target; their device ids."""
        return await notices.send_notice(self.ctx, caller, event, user_id, data, ui)

    # events

    def events(self, caller: Principal, after: int, idle: float = 15.0) -> AsyncIterator[Event | None]:
        """The user's event stream from ``after``; checks the caller before the first event."""
        caller.require(TokenKind.AGENT, scope=Scope.EVENTS)
        return events.stream(self.ctx, caller, after, idle)

    async def hold_link(self, caller: DeviceCaller, seconds: float | None) -> None:
        """Mark the device's live link held for ``seconds`` more (None: the link closed)."""
        await devices.hold_link(self.store, self.clock, caller, seconds)

    def device_link(self, caller: DeviceCaller, token: str) -> AsyncGenerator[dict[str, Any], None]:
        """The frames of the device's live link (calls, approvals, notices, then ``device:revoked`` once
        it is removed or its token revoked or expired), revalidating the device by its token on every wake
        and at the token's expiry; the link is held (online) while the iterator runs."""
        devices.require_device_scope(caller, Scope.DEVICE_READ)
        return linking.frames(self.ctx, caller, lambda: self.authenticate_device(token), self.links)

    async def moved_to(self, caller: DeviceCaller, host: str) -> str | None:
        """Where a device that linked at ``host`` should go (``device:moved``), if the gateway moved."""
        return await moving.moved_to(self.ctx, caller, host, self.public_url, self._moved)

    async def serve_at(self, public_url: str, *, move: bool, guard: bool = True) -> list[moving.Stranded]:
        """Record the address the gateway is served at; with ``guard``, the tenants whose devices it
        would strand, unless ``move``. For ``tapgate serve``, before it listens."""
        return await moving.serve_at(self.ctx, public_url, move=move, guard=guard)

    async def must_pair_again(self, tenant_id: str, devices: list[Device]) -> set[str]:
        """The ids of the browser-app devices among ``devices`` that the gateway's move left behind."""
        return await moving.must_pair_again(self.ctx, tenant_id, devices)

    async def link_result(self, caller: DeviceCaller, frame: DeviceResult) -> dict[str, Any]:
        """Take a ``device:result`` frame; the ``device:ack`` that says what became of it."""
        devices.require_device_scope(caller, Scope.DEVICE_WRITE)
        return await linking.acknowledge(self.ctx, caller, frame, self.links)

    # approvals

    async def authenticate_any(self, token: str) -> Principal:
        """A caller of any kind; a device token's device is revalidated (and marked present)."""
        principal = await self.authenticate(token)
        if principal.kind is TokenKind.DEVICE:
            return (await self.authenticate_device(token)).principal
        return principal

    async def inbox(self, caller: Principal, wait: float = 0) -> Sequence[Approval]:
        return await approving.inbox(self.ctx, caller, wait)

    async def decide(self, caller: Principal, approval_id: str, body: DecisionBody) -> Approval:
        return await approving.decide(self.ctx, caller, approval_id, body, Relying.of(self.public_url))

    # passkeys

    async def passkey_options(self, caller: DeviceCaller) -> dict[str, Any]:
        return await passkeys.options(self.ctx, Relying.of(self.public_url), caller)

    async def register_passkey(self, caller: DeviceCaller, credential: Mapping[str, Any]) -> Passkey:
        return await passkeys.register(self.ctx, Relying.of(self.public_url), caller, credential)

    async def list_passkeys(self, caller: DeviceCaller) -> tuple[Sequence[Passkey], bool]:
        return await passkeys.list_for(self.ctx, caller)

    async def set_user_verification(self, caller: Principal, user_id: str, required: bool | None) -> None:
        await passkeys.set_required(self.ctx, caller, user_id, required)

    # ingest

    async def ingest(
        self, caller: DeviceCaller, channel: str, sender: str, body: str, received_at: datetime
    ) -> Ingested:
        return await ingesting.ingest(self.ctx, caller, channel, sender, body, received_at)

    # the person's console

    async def start_console_sign_in(
        self, tenant_id: str, user_agent: str, address: str
    ) -> tuple[SignIn, str]:
        """A sign-in a paired phone can approve, and the token only the starting browser keeps; at most
        ``console_sign_ins_per_address`` open from one address in this process. Raises RateLimited."""
        return await console.start_phone_sign_in(
            self.ctx, self._sign_in_starts, tenant_id, user_agent, address
        )

    def console_sign_in_url(self, sign_in: SignIn) -> str:
        """What the console's QR code carries: the browser app opens it and asks its person."""
        return f"{self.public_url}/app/#console={sign_in.tenant_id}.{sign_in.sign_in_id}"

    async def console_link(self, caller: Principal, user_id: str, base_url: str | None = None) -> str:
        """A one-time link that signs ``user_id`` into the console (operator only; 15 minutes), on
        ``base_url`` (default: ``public_url``)."""
        token = await console.create_link(self.ctx, caller, user_id)
        return f"{(base_url or self.public_url).rstrip('/')}/console/link/{token}"

    async def ask_console_sign_in(self, caller: DeviceCaller, sign_in_id: str, address: str) -> Approval:
        """The phone that scanned the console's code (its request from ``address``) opens the
        console_login approval it then signs."""
        return await console.ask_phone(self.ctx, caller.principal, sign_in_id, address)

    async def console_sign_in_state(self, token: str) -> tuple[SignIn, Approval | None]:
        return await console.sign_in_state(self.ctx, token)

    async def finish_console_sign_in(
        self, token: str, kind: SignInKind, user_agent: str
    ) -> console.NewSession:
        """The session an approved sign-in of ``kind`` opens, once. Raises Gone."""
        return await console.finish_sign_in(self.ctx, token, kind, user_agent)

    async def console_session(self, cookie: str) -> tuple[ConsoleSession, str]:
        """The live session behind a console cookie, and the cookie's secret (its forms' CSRF key)."""
        return await console.authenticate(self.ctx, cookie)

    async def console_sessions(self, session: ConsoleSession) -> Sequence[ConsoleSession]:
        return await console.sessions(self.ctx, session)

    async def revoke_console_session(self, session: ConsoleSession, session_id: str) -> None:
        await console.revoke_session(self.ctx, session, session_id)

    async def console_user(self, caller: Principal) -> User:
        return await console.user(self.ctx, caller)

    async def create_agent_token(
        self,
        session: ConsoleSession,
        agent_id: str,
        scopes: Iterable[str] | None,
        expires_in_seconds: int,
        agent_name: str | None = None,
    ) -> accounts.NewToken:
        """A person mints a token for an agent of their own in the console (its Agents page): it expires,
        within ``console_agent_token_days``, and names the session that made it. Raises InvalidInput."""
        caller = session.principal()
        caller.require(TokenKind.USER, scope=Scope.DEVICE_WRITE)
        assert caller.user_id is not None
        longest = self.limits.console_agent_token_days * 86_400
        if not 1 <= expires_in_seconds <= longest:
            raise InvalidInput(
                "expires",
                f"A token made in the console lives at most {self.limits.console_agent_token_days} days.",
            )
        return await accounts.create_token(
            self.store,
            self.clock,
            caller,
            caller.user_id,
            TokenKind.AGENT,
            scopes,
            agent_id,
            None,
            expires_in_seconds,
            console_session_id=session.session_id,
            agent_name=agent_name,
        )

    async def pause_agents(self, caller: Principal, paused: bool) -> bool:
        """Pause or resume every agent of the person (their calls get ``[deny] paused by the person``)."""
        if paused:
            # This process's own hand-over marks go first: a call its long-poll handed is not refused.
            await self.hands.flush()
        return await console.set_paused(self.ctx, caller, paused)

    async def agents_paused(self, caller: Principal) -> bool:
        return await console.paused(self.ctx, caller)

    async def call_history(
        self, caller: Principal, agent_id: str | None = None, status: str | None = None
    ) -> list[console.CallRow]:
        caller.require(TokenKind.USER, scope=Scope.DEVICE_READ)
        return await console.calls(self.ctx, caller, agent_id, status)

    async def person_audit(self, caller: Principal) -> list[AuditEntry]:
        """The person's own journal entries among the tenant's newest."""
        caller.require(TokenKind.USER, scope=Scope.DEVICE_READ)
        return await console.audit(self.ctx, caller)
