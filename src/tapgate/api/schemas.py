"""Request and response bodies of the HTTP API; requests refuse unknown fields and wrong types."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from tapgate.domain.invocations import MAX_WAIT_SECONDS


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class NewUser(Request):
    user_id: str = Field(max_length=40, description="A slug: lower-case words joined by '-'")
    display_name: str | None = Field(None, max_length=80)


class UserView(BaseModel):
    user_id: str
    display_name: str


class NewToken(Request):
    kind: Literal["user", "agent"]
    scopes: list[str] | None = Field(None, max_length=10)
    agent_id: str | None = Field(None, max_length=40)
    agent_name: str | None = Field(
        None, max_length=40, description="An agent token: who asks, as the person's cards say"
    )
    require_device_signature: bool | None = None
    expires_in_seconds: int | None = Field(
        None, ge=1, le=315_360_000, description="The token stops working this many seconds from now"
    )


class TokenView(BaseModel):
    token: str = Field(description="Shown once; tapgate keeps only its hash.")
    token_id: str
    kind: str
    scopes: list[str]
    expires_at: datetime | None = None


class TokenInfo(BaseModel):
    """A token or console session as listed: what it may do and when it was used, never its secret."""

    token_id: str
    kind: str
    user_id: str | None
    agent_id: str | None
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None = Field(description="Updated at most once a minute")
    signed_in_by: str | None = Field(
        None,
        description="A console_session: the device whose signature signed it in (none: an operator's link)",
    )
    console_session_id: str | None = Field(
        None, description="An agent token made in the console: the console session that made it"
    )
    agent_name: str | None = Field(None, description="An agent token: who asks on the person's cards")


class TokenList(BaseModel):
    tokens: list[TokenInfo]


class AuditEntryView(BaseModel):
    seq: int
    at: str
    action: str
    actor: str
    outcome: str
    subject: str
    reason: str
    data: dict[str, str | int | bool | None]
    prev_hash: str
    hash: str


class AuditPage(BaseModel):
    entries: list[AuditEntryView]
    next: int | None = Field(description="Pass as ?after= for the next page; null at the end.")


class Health(BaseModel):
    status: str


class PushTargetBody(Request):
    kind: str = Field(max_length=24, description="Push kind: a relay name such as fcm, or webpush, apns")
    token: str = Field(max_length=4096, description="The device's push address for that kind")


class DeviceBody(Request):
    """A device as enrolment and pairing declare it; the manifest is checked entry by entry."""

    device_id: str = Field(max_length=24, description="Lower-case words joined by '-'")
    name: str = Field(max_length=40)
    kind: str = Field(max_length=24, description="What it is: phone, lamp, laptop…")
    alg: Literal["p256", "ed25519"]
    public_key: str = Field(
        max_length=1024, description="Base64: SubjectPublicKeyInfo, SEC1 point or raw Ed25519"
    )
    push: PushTargetBody | None = None
    capabilities: list[dict[str, Any]] = Field(default_factory=list, max_length=32)


# Either shape, checked by the domain (read_grants) so that every route says the same sentence.
GrantsField = Annotated[
    Any,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": "string"}, "maxItems": 32},
                {"type": "object", "additionalProperties": {"type": "boolean"}, "maxProperties": 32},
            ],
            "description": "Capability names to grant, or an object of capability names and true/false",
        }
    ),
]


class EnrolDevice(DeviceBody):
    grants: GrantsField = None


class CapabilityView(BaseModel):
    name: str
    kind: str
    label: str = Field(description="What the person reads on cards (the name in words if none was declared)")
    description: str
    params: dict[str, dict[str, Any]]
    confirm: bool
    granted: bool


class PushView(BaseModel):
    kind: str


class DeviceView(BaseModel):
    device_id: str
    name: str
    kind: str
    alg: str
    public_key: str
    status: str
    push: PushView | None
    capabilities: list[CapabilityView]
    created_at: str
    last_seen_at: str | None


class DeviceAnswer(BaseModel):
    device: DeviceView


class Redeclared(DeviceAnswer):
    grants_asked: list[str] = Field(
        default_factory=list,
        description="Capabilities marked granted: true that now wait for the person to approve the grant.",
    )
    grants_not_asked: list[str] = Field(
        default_factory=list,
        description="Capabilities marked granted: true that stay ungranted until the person grants them "
        "in the console (they have no device that approves for them).",
    )
    note: str | None = Field(None, description="What became of the grants the device marked, in words.")


class EnrolledDevice(BaseModel):
    device: DeviceView
    device_token: str = Field(description="Shown once; tapgate keeps only its hash.")


class DeviceList(BaseModel):
    devices: list[DeviceView]


class Grants(Request):
    grants: GrantsField


class Capabilities(Request):
    capabilities: list[dict[str, Any]] = Field(max_length=32)


class NewPairing(Request):
    pass


class PairingStarted(BaseModel):
    pairing_id: str
    code: str = Field(description="Single use, for 10 minutes; also inside url and the QR code")
    url: str
    expires_at: str


class PairingView(BaseModel):
    pairing_id: str
    status: str
    expires_at: str
    device: DeviceView | None


class Pair(DeviceBody):
    code: str = Field(max_length=200)
    app: Literal["browser"] | None = Field(
        None, description="'browser' from the browser app: its key stays with this origin"
    )


class Paired(BaseModel):
    pairing_id: str
    device_id: str
    device_token: str = Field(description="Works once the person confirms the pairing")
    comparison_code: str = Field(description="Show it: the person types it to confirm")
    status: str


class Consent(Request):
    comparison_code: str = Field(
        "",
        max_length=7,
        pattern=r"^([0-9]{3} ?[0-9]{3})?$",
        description="Needed to approve: six digits, with or without the space they are shown with",
    )
    approved: bool
    grants: GrantsField = None


class SessionBody(Request):
    kind: Literal["chat", "schedule", "subagent"]
    attended: bool


class SessionView(BaseModel):
    session_id: str
    kind: str
    attended: bool
    created_at: str
    updated_at: str


class SessionAnswer(BaseModel):
    session: SessionView


class MessageBody(Request):
    device_id: str | None = Field(None, max_length=24)
    capabilities: list[str] = Field(default_factory=list, max_length=32)


class MessageRecorded(BaseModel):
    session_id: str
    phone_action: bool = Field(description="Whether the phone_action tool is now offered in the session")


class ToolList(BaseModel):
    tools: list[dict[str, Any]]


class InvocationBody(Request):
    tool: str = Field(max_length=64)
    arguments: dict[str, Any] = Field(default_factory=dict)
    invocation_id: str | None = Field(None, max_length=64, description="Your id, for idempotent replays")
    session_id: str | None = Field(None, max_length=100)
    run_id: str | None = Field(None, max_length=100)
    origin: Literal["owner", "untrusted"] = "owner"
    shadow: bool = False
    wait: float = Field(
        0, ge=0, le=MAX_WAIT_SECONDS, description="Seconds to hold the request for the answer"
    )
    if_offline: Literal["wait", "fail"] = Field(
        "wait", description="fail: answer unavailable at once when the device is offline"
    )


class ResultView(BaseModel):
    text: str
    message: str | None
    trust: Literal["external_untrusted"]


class InvocationView(BaseModel):
    binding_code: str | None = Field(None, description="The code on the person's card, while it asks them")
    id: str
    tool: str
    status: Literal[
        "pending", "awaiting_approval", "done", "declined", "failed", "expired", "refused", "unavailable"
    ]
    result: ResultView | None
    reason: str | None
    created_at: str
    resolved_at: str | None
    device_online: bool | None = Field(
        None, description="The device has a live link or a push route now (null: no such device)"
    )
    mandate_id: str | None = Field(
        None, description="The standing mandate the call went under, without asking the person"
    )


class DeviceInvocation(BaseModel):
    id: str
    tool: str
    capability: str
    arguments: dict[str, Any]
    summary: str | None
    created_at: str
    expires_at: str
    binding_code: str | None = Field(None, description="The code on the agent's view, when it was approved")


class DeviceInvocations(BaseModel):
    invocations: list[DeviceInvocation]


class ResultBody(Request):
    status: Literal["done", "declined", "failed", "sent", "cancelled"]
    message: str | None = Field(None, max_length=4096)


class ResultAccepted(BaseModel):
    id: str
    status: str


class SignView(BaseModel):
    format: str
    challenge: str
    expires_at: int
    action_sha256: str
    algorithms: list[str]


class ApprovalView(BaseModel):
    id: str
    kind: str
    subject: str
    prompt: str
    preview: dict[str, Any]
    sign: SignView
    binding_code: str
    created_at: str
    expires_at: str
    tool: str = Field(
        description="The planned action's tool; with subject (device), kind (capability), arguments and "
        "the preview it is what sign.action_sha256 hashes"
    )
    arguments: dict[str, Any] = Field(description="The planned action's exact arguments")
    agent_asks: bool = Field(
        False, description="An agent's call waits on it: the card offers \"This wasn't me\" (deny and pause)"
    )


class Inbox(BaseModel):
    approvals: list[ApprovalView]


class DecisionRequest(Request):
    decision: Literal["approved", "denied"]
    device_id: str | None = Field(None, max_length=24)
    signature: str | None = Field(None, max_length=200)
    message: str | None = Field(None, max_length=500, description="The person's words to the agent")
    not_me: bool = Field(False, description="This wasn't me: decline and pause the agent")
    passkey: dict[str, Any] | None = Field(
        None, description="A WebAuthn assertion whose challenge is the SHA-256 of the signed text"
    )


class DecisionAnswer(BaseModel):
    id: str
    status: str


class IngestBody(Request):
    channel: Literal["sms"]
    sender: str = Field(max_length=64, description="The number or name the message came from")
    body: str = Field(max_length=4096)
    received_at: datetime = Field(
        strict=False, description="When the phone received it (ISO 8601 with a zone)"
    )


class Ingested(BaseModel):
    receipt: str
    duplicate: bool = Field(description="True when this message was received before: nothing new started")
    session_id: str = Field(description="The triage session the message was routed to")


class ErrorDetail(BaseModel):
    code: str = Field(
        description="A stable slug: invalid, malformed, unauthenticated, forbidden, not_found, …"
    )
    message: str = Field(description="One sentence a person can act on")


class ErrorBody(BaseModel):
    error: ErrorDetail


class NoticeBody(Request):
    event: str = Field(
        max_length=40,
        description="goal.blocked, goal.done, memory.proposed, suggestion.proposed, run.finished, run.failed",
    )
    user_id: str | None = Field(None, max_length=40, description="The person (an operator must name one)")
    data: dict[str, Any] | None = Field(
        None, description="Ids and flags only: ids (at most 200 characters), numbers and booleans"
    )
    ui: dict[str, Any] | None = Field(
        None, description="{title, body}: shown only where the operator turned notice_text on"
    )


class NoticeAnswer(BaseModel):
    delivered_to: list[str] = Field(description="The devices the notice is queued for")


class MandateView(BaseModel):
    mandate_id: str
    agent_id: str | None = Field(description="The agent it is for; null: any agent of the person")
    tools: list[str]
    constraints: dict[str, dict[str, Any]]
    max_calls: int
    per_day: int | None
    purpose: str
    status: Literal["awaiting_signature", "active", "exhausted", "expired", "revoked", "denied"]
    used: int
    used_today: int = Field(description="Calls under it this server UTC day")
    created_at: str
    expires_at: str
    approval_id: str | None = Field(description="The approval the person signs it with")


class MandateList(BaseModel):
    mandates: list[MandateView]


class MandateRequest(BaseModel):
    """What an agent asks the person to sign once (documentation: the route reads the body itself)."""

    agent_id: str | None = Field(None, description="Default: the agent token's own agent; null: any agent")
    tools: list[str] = Field(description="Exact tool names, 1 to 16")
    constraints: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="param: {equals: v} | {one_of: [v, …]} | {matches: regex} | {max: n} | {max_length: n}",
    )
    max_calls: int = Field(description="1 to 1000")
    per_day: int | None = Field(None, description="Calls per server UTC day")
    expires_in_seconds: int = Field(description="60 to 2,592,000 (30 days)")
    purpose: str = Field(description="Why, in at most 200 characters: the person reads it")
