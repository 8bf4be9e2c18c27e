"""Loopback fakes of the push services: a relay, a Web Push endpoint, APNs and FCM, on a real uvicorn.

Each fake checks what it receives the way the real service (or a careful relay author) would: the relay
with ``tapgate.relay.verify`` itself, Web Push by verifying the VAPID JWT and decrypting the payload with
the subscription's private key, APNs by verifying the ES256 provider token, FCM by verifying the RS256
assertion at its token endpoint and the bearer token at its send endpoint. A failed check is answered 400
and written to ``problems``, which every test expects empty. Every request that reached a fake is in
``seen``; ``hits`` counts them by route. A second, raw TCP listener resets every connection it accepts.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import anyio
import http_ece
import uvicorn
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tapgate.domain.errors import RelayVerificationError
from tapgate.relay import DeliveryCache, verify

SLOW = 30.0  # the slow fakes stay slow until the sender gives up (this bounds a fake nobody left)
FCM_SCOPE = "https://www.googleapis.com/auth/firebase.messaging"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CheckFailed(Exception):
    pass


def check(condition: object, what: str) -> None:
    if not condition:
        raise CheckFailed(what)


def jwt_parts(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """Header, claims, signing input and raw signature of a compact JWS."""
    head, claims, signature = token.split(".")
    return (
        json.loads(unb64url(head)),
        json.loads(unb64url(claims)),
        f"{head}.{claims}".encode(),
        unb64url(signature),
    )


def verify_es256(token: str, public_key: ec.EllipticCurvePublicKey) -> tuple[dict[str, Any], dict[str, Any]]:
    header, claims, signed, raw = jwt_parts(token)
    check(len(raw) == 64, "an ES256 signature is 64 raw bytes (r‖s)")
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        public_key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise CheckFailed("the ES256 signature does not verify") from None
    return header, claims


@dataclass
class Subscription:
    """A browser's push subscription, made here: the sender gets ``token``, the fake keeps the keys."""

    endpoint: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes
    status: int = 201

    @property
    def token(self) -> str:
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return json.dumps(
            {"endpoint": self.endpoint, "keys": {"p256dh": b64url(point), "auth": b64url(self.auth)}}
        )


@dataclass
class Accounts:
    """The credentials the senders are given and the fakes check against."""

    relay_secret: str
    vapid_key: ec.EllipticCurvePrivateKey
    vapid_subject: str
    apns_key: ec.EllipticCurvePrivateKey
    apns_team: str
    apns_key_id: str
    apns_topic: str
    fcm_key: rsa.RSAPrivateKey
    fcm_project: str
    fcm_email: str
    fcm_key_id: str

    @property
    def vapid_private_b64(self) -> str:
        der = self.vapid_key.private_bytes(
            serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return b64url(der)

    @property
    def vapid_public_b64(self) -> str:
        return b64url(
            self.vapid_key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
        )

    @property
    def apns_pem(self) -> str:
        return self.apns_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()

    @property
    def fcm_pem(self) -> str:
        return self.fcm_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()


def new_accounts() -> Accounts:
    return Accounts(
        relay_secret="relay-secret-" + uuid.uuid4().hex,
        vapid_key=ec.generate_private_key(ec.SECP256R1()),
        vapid_subject="mailto:ops@tapgate.example",
        apns_key=ec.generate_private_key(ec.SECP256R1()),
        apns_team="TEAM123456",
        apns_key_id="KEY7890ABC",
        apns_topic="org.tapgate.phone",
        fcm_key=rsa.generate_private_key(public_exponent=65537, key_size=2048),
        fcm_project="tapgate-test",
        fcm_email="pusher@tapgate-test.iam.gserviceaccount.com",
        fcm_key_id="fcm-key-" + uuid.uuid4().hex[:8],
    )


@dataclass
class Seen:
    route: str
    path: str
    headers: dict[str, str]
    body: bytes
    plaintext: bytes = b""  # Web Push: the body decrypted

    def everything(self) -> bytes:
        """Every byte the sender chose: path, headers, body (and what the body decrypts to)."""
        head = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.path}\n{head}\n".encode() + self.body + b"\n" + self.plaintext


@dataclass
class PushFakes:
    accounts: Accounts
    base_url: str = ""
    reset_url: str = ""
    seen: list[Seen] = field(default_factory=list)
    hits: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    relay_seen: DeliveryCache = field(default_factory=DeliveryCache)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    apns_faults: dict[str, tuple[int, str]] = field(default_factory=dict)
    apns_expired: set[str] = field(default_factory=set)  # provider tokens answered ExpiredProviderToken
    fcm_faults: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    fcm_token_fault: tuple[int, dict[str, Any]] | None = None
    fcm_issued: list[str] = field(default_factory=list)
    fcm_revoked: set[str] = field(default_factory=set)
    arrived: threading.Condition = field(default_factory=threading.Condition)  # notified per request seen

    def wait_seen(self, route: str, count: int, timeout: float) -> bool:
        """Block until ``count`` requests reached ``route`` (False after ``timeout`` seconds)."""
        with self.arrived:
            return self.arrived.wait_for(lambda: self.hits[route] >= count, timeout=timeout)

    def reset(self) -> None:
        self.seen.clear()
        self.hits.clear()
        self.problems.clear()
        self.relay_seen = DeliveryCache()
        self.subscriptions.clear()
        self.apns_faults.clear()
        self.apns_expired.clear()
        self.fcm_faults.clear()
        self.fcm_token_fault = None
        self.fcm_issued.clear()
        self.fcm_revoked.clear()

    def route_seen(self, route: str) -> list[Seen]:
        return [s for s in self.seen if s.route == route]

    def subscribe(self, name: str, host: str = "127.0.0.1", status: int = 201) -> Subscription:
        """A new browser subscription whose endpoint is this fake, answering ``status``."""
        port = self.base_url.rsplit(":", 1)[1]
        subscription = Subscription(
            f"http://{host}:{port}/webpush/{name}",
            ec.generate_private_key(ec.SECP256R1()),
            uuid.uuid4().bytes,
            status,
        )
        self.subscriptions[name] = subscription
        return subscription

    # -- the app -----------------------------------------------------------------------------------------

    def app(self) -> Starlette:
        routes = [
            Route("/relay/ok", self._relay_ok, methods=["POST"]),
            Route("/relay/target", self._relay_target, methods=["GET", "POST"]),
            Route("/relay/{fault}", self._relay_fault, methods=["POST"]),
            Route("/webpush/{name}", self._webpush, methods=["POST"]),
            Route("/3/device/{token}", self._apns, methods=["POST"]),
            Route("/oauth2/token", self._fcm_token, methods=["POST"]),
            Route("/v1/projects/{project}/messages:send", self._fcm_send, methods=["POST"]),
        ]
        return Starlette(routes=routes, exception_handlers={CheckFailed: self._refuse})

    async def _refuse(self, request: Request, exc: Exception) -> Response:
        self.problems.append(f"{request.url.path}: {exc}")
        return Response(str(exc), status_code=400)

    async def _record(self, request: Request, route: str, plaintext: bytes = b"") -> Seen:
        seen = Seen(route, request.url.path, dict(request.headers), await request.body(), plaintext)
        with self.arrived:
            self.seen.append(seen)
            self.hits[route] += 1
            self.arrived.notify_all()
        return seen

    async def _relay_ok(self, request: Request) -> Response:
        body = await request.body()
        try:
            verify(request.headers, body, self.accounts.relay_secret, seen=self.relay_seen)
        except RelayVerificationError as e:
            if e.reason == "replayed":  # as tapgate.relay advises: the push went out the first time
                self.hits["replayed"] += 1
                return Response(status_code=200)
            raise CheckFailed(f"verify refused it: {e.reason}") from None
        await self._record(request, "relay")
        return Response(status_code=202)

    async def _relay_target(self, request: Request) -> Response:
        self.hits["redirect-target"] += 1
        return Response(status_code=200)

    async def _relay_fault(self, request: Request) -> Response:
        fault = request.path_params["fault"]
        try:  # no replay cache here: each attempt of one delivery is checked on its own
            verify(request.headers, await request.body(), self.accounts.relay_secret)
        except RelayVerificationError as e:
            raise CheckFailed(f"verify refused it: {e.reason}") from None
        await self._record(request, f"relay/{fault}")
        if (
            fault == "timeout"
        ):  # no reply until the sender leaves (the body is read: the next message is that)
            with anyio.move_on_after(SLOW):
                await request.receive()
            return Response(status_code=200)
        if fault == "slow-body":
            return StreamingResponse(_trickle(), status_code=200)
        if fault == "200-body":
            return JSONResponse({"queued": True, "note": "any body will do"})
        status = int(fault)
        if 300 <= status < 400:
            return Response(status_code=status, headers={"location": f"{self.base_url}/relay/target"})
        return Response(status_code=status)

    async def _webpush(self, request: Request) -> Response:
        subscription = self.subscriptions[request.path_params["name"]]
        headers = request.headers
        scheme, _, params = headers.get("authorization", "").partition(" ")
        check(scheme == "vapid", "Authorization uses the vapid scheme (RFC 8292)")
        parts = dict(p.strip().split("=", 1) for p in params.split(","))
        check(parts.get("k") == self.accounts.vapid_public_b64, "k is the server's VAPID public key")
        public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64url(parts["k"]))
        header, claims = verify_es256(parts["t"], public)
        check(header.get("alg") == "ES256", "the VAPID JWT is ES256")
        origin = f"{request.url.scheme}://{request.url.netloc}"
        check(claims.get("aud") == origin, f"aud is the endpoint's origin {origin}, not {claims.get('aud')}")
        check(claims.get("sub") == self.accounts.vapid_subject, "sub is the operator's contact")
        check(time.time() < claims.get("exp", 0) <= time.time() + 86_400, "exp is in the next 24 hours")
        check(headers.get("content-encoding") == "aes128gcm", "the body is aes128gcm (RFC 8188)")
        check(headers.get("ttl", "").isdigit(), "a TTL is given (RFC 8030)")
        body = await request.body()
        try:
            plaintext = http_ece.decrypt(
                body, private_key=subscription.private_key, auth_secret=subscription.auth, version="aes128gcm"
            )
        except Exception as e:
            raise CheckFailed(f"the body does not decrypt with the subscription's keys: {e!r}") from None
        await self._record(request, "webpush", plaintext)
        return Response(status_code=subscription.status)

    async def _apns(self, request: Request) -> Response:
        headers = request.headers
        scheme, _, token = headers.get("authorization", "").partition(" ")
        check(scheme == "bearer", "APNs gets a bearer provider token")
        header, claims = verify_es256(token, self.accounts.apns_key.public_key())
        check(header == {"alg": "ES256", "kid": self.accounts.apns_key_id}, f"the JWT header is {header}")
        check(set(claims) == {"iss", "iat"} and claims["iss"] == self.accounts.apns_team, f"claims {claims}")
        check(isinstance(claims["iat"], int), "iat is whole seconds")
        check(headers.get("apns-topic") == self.accounts.apns_topic, "apns-topic is the app's bundle id")
        check(headers.get("apns-push-type") == "alert", "apns-push-type is alert")
        check(headers.get("apns-priority") == "10", "apns-priority is 10")
        apns_id = headers.get("apns-id", "")
        check(str(uuid.UUID(apns_id)) == apns_id.lower(), "apns-id is a UUID")
        body = json.loads(await request.body())
        check(set(body) == {"aps", "tapgate"}, f"the body holds aps and tapgate, not {sorted(body)}")
        await self._record(request, "apns")
        if token in self.apns_expired:
            return JSONResponse({"reason": "ExpiredProviderToken"}, status_code=403)
        fault = self.apns_faults.get(request.path_params["token"])
        if fault is not None:
            return JSONResponse({"reason": fault[1]}, status_code=fault[0])
        return Response(status_code=200, headers={"apns-id": apns_id})

    async def _fcm_token(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        check(form.get("grant_type") == JWT_BEARER, "the JWT-bearer grant")
        header, claims, signed, signature = jwt_parts(form["assertion"])
        try:
            self.accounts.fcm_key.public_key().verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            raise CheckFailed("the RS256 assertion does not verify") from None
        check(header == {"alg": "RS256", "typ": "JWT", "kid": self.accounts.fcm_key_id}, f"header {header}")
        check(claims.get("iss") == self.accounts.fcm_email, "iss is the service account")
        check(claims.get("scope") == FCM_SCOPE, "the firebase.messaging scope")
        check(claims.get("aud") == str(request.url), "aud is the token endpoint")
        check(claims["exp"] - claims["iat"] == 3600, "the assertion lives an hour")
        await self._record(request, "fcm-token")
        if self.fcm_token_fault is not None:
            return JSONResponse(self.fcm_token_fault[1], status_code=self.fcm_token_fault[0])
        token = f"ya29.fake-{len(self.fcm_issued)}-{uuid.uuid4().hex}"
        self.fcm_issued.append(token)
        return JSONResponse({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})

    async def _fcm_send(self, request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        check(scheme == "Bearer" and token in self.fcm_issued, "the bearer token is one the endpoint issued")
        check(request.path_params["project"] == self.accounts.fcm_project, "the configured project")
        message = json.loads(await request.body())["message"]
        check(all(isinstance(v, str) for v in message["data"].values()), "FCM data values are strings")
        await self._record(request, "fcm")
        if token in self.fcm_revoked:
            return JSONResponse({"error": {"code": 401, "status": "UNAUTHENTICATED"}}, status_code=401)
        fault = self.fcm_faults.get(message["token"])
        if fault is not None:
            return JSONResponse(fault[1], status_code=fault[0])
        return JSONResponse({"name": f"projects/{self.accounts.fcm_project}/messages/0:{uuid.uuid4().hex}"})


async def _trickle() -> AsyncIterator[bytes]:
    """A byte every 0.05 s until the sender leaves: each read is quick, the whole body never ends."""
    with anyio.move_on_after(SLOW):
        while True:
            yield b"."
            await asyncio.sleep(0.05)


def fcm_error(status: int, word: str, code: str = "") -> tuple[int, dict[str, Any]]:
    details = (
        [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": code}] if code else []
    )
    return status, {"error": {"code": status, "message": "(fake)", "status": word, "details": details}}


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()


class LoopbackServer:
    """The fakes on uvicorn in a thread of its own, on a free port of 127.0.0.1; a context manager."""

    def __init__(self, fakes: PushFakes) -> None:
        self.fakes = fakes
        self._http = _listening()
        self._raw = _listening()
        self.fakes.base_url = f"http://127.0.0.1:{self._http.getsockname()[1]}"
        self.fakes.reset_url = f"http://127.0.0.1:{self._raw.getsockname()[1]}/relay"
        config = uvicorn.Config(
            fakes.app(),
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            http="h11",
            timeout_graceful_shutdown=2,
        )
        self._server = _Server(config)
        self._thread = threading.Thread(target=asyncio.run, args=(self._serve(),), daemon=True)

    async def _serve(self) -> None:
        raw = await asyncio.start_server(self._reset, sock=self._raw)
        try:
            await self._server.serve(sockets=[self._http])
        finally:
            raw.close()
            await raw.wait_closed()

    async def _reset(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        self.fakes.hits["reset"] += 1
        writer.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
        )
        writer.transport.abort()  # with SO_LINGER 0 the close is a TCP RST

    def __enter__(self) -> PushFakes:
        self._thread.start()
        if not self._server.ready.wait(timeout=5):
            raise RuntimeError("the loopback push fakes did not start within 5 s")
        return self.fakes

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        if self._thread.is_alive():
            raise RuntimeError("the loopback push fakes did not stop within 10 s")


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(128)
    sock.setblocking(False)
    return sock
