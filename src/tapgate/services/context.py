"""What every use case may reach: the ports, the clock, the limits and the policies, chosen once."""

from __future__ import annotations

from dataclasses import dataclass, field

from tapgate.domain.policy import PolicySet
from tapgate.ports import Clock, Store, Wake
from tapgate.services.handover import Handover
from tapgate.services.known_mandates import KnownMandates


@dataclass(frozen=True, slots=True)
class Limits:
    """What the gateway allows and how long it waits. Each is a setting of the same name, whose default
    is the one here (``Settings`` reads these; ``bootstrap.limits_from`` makes them from the settings)."""

    invocation_timeout_seconds: int = 300
    device_call_timeout_seconds: int = 10
    ingest_daily_cap: int = 500
    approval_sign_ttl_seconds: int = 3600
    max_devices_per_user: int = 10
    max_open_confirmations: int = 5
    require_device_signature: bool = False
    require_user_verification: bool = False  # every decision carries a passkey assertion
    invocation_poll_seconds: float = 2.0
    live_ack_seconds: float = 1.0  # how long a live link may take a call before its push goes out
    redelivery_seconds: float = 30.0  # the long-poll hands a call it handed already only after this long
    not_me_cooldown_seconds: int = 1200  # "this wasn't me" pauses the agent's asks for this long
    triage_idle_seconds: int = 3600  # a triage session idle this long is replaced by a new one
    push_cap: int = 10  # pushes per user per window; past it, nothing more reaches a phone
    push_window_seconds: int = 600
    push_coalesce_seconds: float = 5.0  # a device pushed this recently waits: a burst becomes one push
    push_retry_seconds: tuple[float, ...] = (2.0, 10.0)  # the wait before each retry of a failed push
    push_lease_seconds: float = 60.0  # a worker's claim on a row; past it, another worker may send it
    push_sweep_seconds: float = 5.0  # the worker looks again this often, notified or not
    notice_text: bool = False  # notices may show the person the agent's own title and body
    notice_life_seconds: int = 86_400  # a notice waits this long for a device's next live link
    retention_days: int = 30  # message bodies are erased after this many days (services/retention.py)
    console_agent_token_days: int = 90  # an agent token made in the console lives at most this long
    console_sign_ins_per_address: int = 20  # console sign-ins one address may have open (per process)


@dataclass(frozen=True, slots=True)
class Context:
    store: Store
    clock: Clock
    wake: Wake
    limits: Limits = field(default_factory=Limits)
    policies: PolicySet = field(default_factory=PolicySet)
    device_channel: bool = False
    handover: Handover = field(default_factory=Handover)  # answers handed to this process's waiting calls
    mandates: KnownMandates = field(default_factory=KnownMandates)  # the live mandates last read here

    def swap_policies(self, policies: PolicySet) -> None:
        """Put new rules in force for the next call: one reference swapped, so a call that read
        ``policies`` keeps the whole set it read (the only field that changes after start)."""
        object.__setattr__(self, "policies", policies)


def device_key(tenant_id: str, device_uid: str) -> str:
    """Notified when a device has new work (or was revoked)."""
    return f"{tenant_id}:device:{device_uid}"


def invocation_key(tenant_id: str, user_id: str, invocation_id: str) -> str:
    """Notified when an invocation is resolved (an id is its user's own)."""
    return f"{tenant_id}:invocation:{user_id}:{invocation_id}"


def auth_key(tenant_id: str) -> str:
    """Notified when a tenant's credentials or devices change in a way that ends a token's rights."""
    return f"{tenant_id}:auth"


def sign_in_key(tenant_id: str, sign_in_id: str) -> str:
    """Notified when a console sign-in is asked or decided on a phone."""
    return f"{tenant_id}:sign-in:{sign_in_id}"


def inbox_key(tenant_id: str, user_id: str) -> str:
    """Notified when the user's inbox of approvals changes."""
    return f"{tenant_id}:inbox:{user_id}"


def events_key(tenant_id: str, user_id: str) -> str:
    """Notified when the user has a new event."""
    return f"{tenant_id}:events:{user_id}"


def tools_key(tenant_id: str, user_id: str) -> str:
    """Notified when the user's tool list may have changed: grants, devices, capabilities, sessions."""
    return f"{tenant_id}:tools:{user_id}"


def notices_key(tenant_id: str, user_id: str) -> str:
    """Notified when the user has a new notice for their devices' live links."""
    return f"{tenant_id}:notices:{user_id}"


def outbox_key(tenant_id: str) -> str:
    """Notified when the tenant's push outbox has a new row."""
    return f"{tenant_id}:outbox"


TENANTS_KEY = "tenants"  # notified when a tenant is created
