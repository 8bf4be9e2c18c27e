"""The person's console: its sign-ins, its sessions, and the cookie and form tokens that carry them.

A console session is the person's own: it acts as their user (never as an operator) and is born either
from a sign-in their paired phone approved with its key, or from a one-time link an operator printed.
The cookie reads ``tgc_<tenant>_<session id>_<secret>``; only the SHA-256 of the secret is stored and it
is compared in constant time. A form's CSRF token is derived from the cookie's secret, so it is bound to
the session and never stored.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import secrets
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from tapgate.domain.accounts import ListedToken
from tapgate.domain.errors import Conflict, Gone, Unauthenticated
from tapgate.domain.principals import SCOPES_BY_KIND, Principal, TokenKind
from tapgate.domain.tokens import hash_secret

CONSOLE_LOGIN = "console_login"  # the approval kind a phone signs to open a console session
ALL_AGENTS = "*"  # the pause row that stands for every agent of the person ("Pause all agents")
PAUSED_REASON = "paused by the person"
SESSION_LIFETIME = timedelta(hours=12)
SIGN_IN_LIFETIME = timedelta(minutes=10)
LINK_LIFETIME = timedelta(minutes=15)
COOKIE_NAME = "tapgate_console"
CONSOLE_SESSION = "console_session"  # the kind a console session is listed as among the person's tokens
_COOKIE_SHAPE = re.compile(r"^tgc_([a-z0-9]+(?:-[a-z0-9]+)*)_([0-9a-f]{16})_([0-9a-f]{64})$")
_SIGN_IN_SHAPE = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)*)\.([0-9a-f]{16})\.([0-9a-f]{64})$")


class SignInKind(StrEnum):
    PHONE = "phone"  # the console showed a QR code; a paired phone signs a console_login approval
    LINK = "link"  # an operator printed a one-time link


class SignInStatus(StrEnum):
    WAITING = "waiting"  # nobody has answered yet
    ASKED = "asked"  # a phone opened its console_login approval
    APPROVED = "approved"  # the phone signed yes: the browser that started it may take its session
    DENIED = "denied"
    USED = "used"  # it became a session; never again


@dataclass(frozen=True, slots=True)
class SignIn:
    """One attempt to open a console session: from the QR code the console shows, or an operator's link.

    ``secret_hash`` is the hash of the secret only the browser that started it (phone sign-in) or the
    link's holder (link sign-in) knows."""

    tenant_id: str
    sign_in_id: str
    kind: SignInKind
    secret_hash: str
    status: SignInStatus
    created_at: datetime
    expires_at: datetime
    user_id: str | None = None
    approval_id: str | None = None
    browser: str = ""  # what the browser says it is, in words ("Chrome on macOS"), never its raw text
    address: str = ""  # the address the server saw the sign-in come from
    approver_uid: str | None = None  # the device that signed it in (its internal id) ...
    approver_id: str | None = None  # ... and its id, as the person knows it

    def open_at(self, now: datetime) -> bool:
        return now < self.expires_at and self.status not in (SignInStatus.USED, SignInStatus.DENIED)

    def asked(self, user_id: str, approval_id: str) -> SignIn:
        if self.status is not SignInStatus.WAITING:
            raise Conflict("This sign-in was answered already; start a new one on the console.")
        return replace(self, status=SignInStatus.ASKED, user_id=user_id, approval_id=approval_id)

    def used(self) -> SignIn:
        return replace(self, status=SignInStatus.USED)


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    tenant_id: str
    session_id: str
    user_id: str
    secret_hash: str
    via: SignInKind
    created_at: datetime
    expires_at: datetime
    browser: str = ""
    revoked_at: datetime | None = None
    approver_uid: str | None = None  # the device whose signature opened it (none: an operator's link)
    approver_id: str | None = None
    last_used_at: datetime | None = None  # written at most once a minute

    def live_at(self, now: datetime) -> bool:
        return self.revoked_at is None and now < self.expires_at

    def listed(self) -> ListedToken:
        return ListedToken(
            self.session_id,
            CONSOLE_SESSION,
            self.user_id,
            None,
            frozenset(SCOPES_BY_KIND[TokenKind.USER]),
            self.created_at,
            self.expires_at,
            self.last_used_at,
            signed_in_by=self.approver_id,
        )

    def principal(self) -> Principal:
        """The person, as their own user token would be: never more."""
        return Principal(
            tenant_id=self.tenant_id,
            credential_id=f"console-{self.session_id}",
            kind=TokenKind.USER,
            scopes=SCOPES_BY_KIND[TokenKind.USER],
            user_id=self.user_id,
        )


@dataclass(frozen=True, slots=True)
class PresentedCookie:
    tenant_id: str
    session_id: str
    secret: str


@dataclass(frozen=True, slots=True)
class PresentedSignIn:
    tenant_id: str
    sign_in_id: str
    secret: str


def new_secret() -> tuple[str, str]:
    """A fresh secret and the hash that is stored."""
    secret = secrets.token_hex(32)
    return secret, hash_secret(secret)


def new_id() -> str:
    return secrets.token_hex(8)


def cookie_value(tenant_id: str, session_id: str, secret: str) -> str:
    return f"tgc_{tenant_id}_{session_id}_{secret}"


def parse_cookie(value: str) -> PresentedCookie:
    match = _COOKIE_SHAPE.fullmatch(value)
    if match is None:
        raise Unauthenticated("Sign in to the console first.")
    return PresentedCookie(*match.groups())


def sign_in_token(tenant_id: str, sign_in_id: str, secret: str) -> str:
    """What a one-time link or the browser's waiting page carries: ``<tenant>.<id>.<secret>``."""
    return f"{tenant_id}.{sign_in_id}.{secret}"


def parse_sign_in(value: str) -> PresentedSignIn:
    match = _SIGN_IN_SHAPE.fullmatch(value)
    if match is None:
        raise Gone("This sign-in link is not valid; ask for a new one.")
    return PresentedSignIn(*match.groups())


def check(secret: str, stored_hash: str, error: Exception) -> None:
    """Raise ``error`` unless ``secret`` hashes to ``stored_hash`` (constant time)."""
    if not hmac.compare_digest(hash_secret(secret), stored_hash):
        raise error


def csrf_token(cookie_secret: str) -> str:
    """The form token of a session: bound to its cookie, never stored."""
    return hmac.new(cookie_secret.encode(), b"tapgate console csrf", hashlib.sha256).hexdigest()[:40]


def check_csrf(cookie_secret: str, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(csrf_token(cookie_secret), presented)


_BROWSERS = (("Edg/", "Edge"), ("OPR/", "Opera"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"))
_SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iOS"),
    ("iPad", "iPadOS"),
    ("Mac OS X", "macOS"),
    ("Macintosh", "macOS"),
    ("Windows", "Windows"),
    ("CrOS", "ChromeOS"),
    ("Linux", "Linux"),
)


def describe_browser(user_agent: str) -> str:
    """The browser and system a User-Agent names, in a few known words ("Chrome on macOS"): never the
    text itself, which the browser (or whoever relays its request) writes as it likes."""
    browser = next((name for mark, name in _BROWSERS if mark in user_agent), None)
    if browser is None and "Safari/" in user_agent:
        browser = "Safari"
    system = next((name for mark, name in _SYSTEMS if mark in user_agent), None)
    if browser and system:
        return f"{browser} on {system}"
    return browser or (f"a browser on {system}" if system else "an unknown browser")


def same_network(a: str, b: str) -> bool:
    """Whether two addresses the server saw are one network: the same address (as behind one home
    router), or private IPv4 addresses of one /24, or IPv6 addresses of one /64."""
    try:
        first, second = ipaddress.ip_address(a), ipaddress.ip_address(b)
    except ValueError:
        return False
    if first == second:
        return True
    if first.version != second.version:
        return False
    if first.version == 6:
        return ipaddress.ip_network(f"{a}/64", strict=False) == ipaddress.ip_network(f"{b}/64", strict=False)
    local = first.is_private and second.is_private
    return local and ipaddress.ip_network(f"{a}/24", strict=False) == ipaddress.ip_network(
        f"{b}/24", strict=False
    )


class SignInStarts:
    """How many sign-ins each address started within their lifetime, in this process: past ``limit`` an
    address is refused until its oldest one has ended. Counted before the tenant is looked up, so an
    unknown tenant is limited exactly like a known one. At most ``addresses`` are remembered; past that
    the longest unseen one is forgotten."""

    def __init__(self, limit: int, addresses: int = 10_000) -> None:
        self.limit = limit
        self._addresses = addresses
        self._started: dict[str, list[datetime]] = {}

    def take(self, address: str, now: datetime) -> int:
        """Count one more sign-in from ``address`` at ``now`` and return 0; past the limit count nothing
        and return the seconds until the address's oldest sign-in ends."""
        since = now - SIGN_IN_LIFETIME
        started = [at for at in self._started.pop(address, []) if at > since]
        self._started[address] = started  # re-inserted: the dict's order is the order last seen
        if len(started) >= self.limit:
            return max(1, int((started[0] - since).total_seconds()) + 1)
        started.append(now)
        while len(self._started) > self._addresses:
            del self._started[next(iter(self._started))]
        return 0
