"""The tables, as SQLAlchemy Core metadata; the migrations in ``migrations/versions`` create them.

Every table carries ``tenant_id``, and every key that points across tables includes it, so a row can
never reference another tenant's row. On PostgreSQL each table has a row-level-security policy on it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.engine import Dialect


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on both engines (SQLite keeps no zone; this puts it back)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; pass an aware UTC time")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Dialect) -> Any:
        """On SQLite, the text SQLAlchemy's own DATETIME writes (``2026-12-03 05:50:01.000000``: always
        six digits, so the text sorts as the time does), made in one step: a third of the time of
        ``process_bind_param`` followed by SQLAlchemy's formatting, and a call binds several."""
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)

        def process(value: datetime | None) -> str | None:
            if value is None:
                return None
            if value.tzinfo is None:
                raise ValueError("naive datetime given to the store; pass an aware UTC time")
            if value.tzinfo is not UTC:
                value = value.astimezone(UTC)
            return value.replace(tzinfo=None).isoformat(" ", "microseconds")

        return process

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


metadata = MetaData()

tenants = Table(
    "tenants",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("name", String(80), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("served_url", String(300)),  # the public_url its devices were last served under
    Column("moved_at", UtcDateTime),  # when `serve --move` moved it there
)

users = Table(
    "users",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("user_id", String(40), primary_key=True),
    Column("display_name", String(80), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
)

credentials = Table(
    "credentials",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("credential_id", String(16), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("scopes", String(200), nullable=False),
    Column("user_id", String(40)),
    Column("agent_id", String(40)),
    Column("device_uid", String(16)),
    Column("require_device_signature", Boolean),
    Column("created_at", UtcDateTime, nullable=False),
    Column("revoked_at", UtcDateTime),
    Column("expires_at", UtcDateTime),
    Column("last_used_at", UtcDateTime),  # written at most once a minute per token, in batches
    Column("console_session_id", String(16)),  # an agent token made in the console: the session that made it
    Column("agent_name", String(40)),  # an agent token: who asks, as the person's cards name it
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    Index("credentials_user", "tenant_id", "user_id"),
)

audit_heads = Table(
    "audit_heads",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
    # The chain's head and the tenant's event counter: whoever holds this row numbers entries and events,
    # so both grow in commit order and a resuming reader misses none. A writer that finds it held by
    # another transaction does not wait: it writes to ``audit_pending`` / ``events_pending`` instead.
    Column("event_seq", BigInteger, nullable=False, server_default="0"),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
)

audit_entries = Table(
    "audit_entries",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("at", UtcDateTime, nullable=False),
    Column("action", String(60), nullable=False),
    Column("actor", String(120), nullable=False),
    Column("outcome", String(30), nullable=False),
    Column("subject", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("data", Text, nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
)

devices = Table(
    "devices",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("device_uid", String(16), primary_key=True),
    Column("user_id", String(40), nullable=False),
    Column("device_id", String(24), nullable=False),
    Column("name", String(40), nullable=False),
    Column("kind", String(24), nullable=False),
    Column("alg", String(16), nullable=False),
    Column("public_key", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("push_kind", String(24)),
    Column("push_token", Text),
    Column("created_at", UtcDateTime, nullable=False),
    Column("last_seen_at", UtcDateTime),
    Column("revoked_at", UtcDateTime),
    Column("link_until", UtcDateTime),  # a live WebSocket link is held until then (refreshed)
    Column("app", String(16)),  # "browser": the browser app, whose key lives on one origin
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    # One live (pending or active) device per id and user; a revoked id may be paired again.
    Index(
        "devices_live_id",
        "tenant_id",
        "user_id",
        "device_id",
        unique=True,
        sqlite_where=text("status != 'revoked'"),
        postgresql_where=text("status != 'revoked'"),
    ),
)

capabilities = Table(
    "capabilities",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("device_uid", String(16), primary_key=True),
    Column("name", String(30), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("definition", Text, nullable=False),
    Column("granted", Boolean, nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
)

pairings = Table(
    "pairings",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("pairing_id", String(16), primary_key=True),
    Column("user_id", String(40), nullable=False),
    Column("code_hash", String(64), nullable=False),
    Column("code", String(120)),
    Column("status", String(20), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("device_uid", String(16)),
    Column("comparison_code", String(6)),
    Column("attempts", Integer, nullable=False),
    Column("decided_at", UtcDateTime),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
)

sessions = Table(
    "sessions",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("user_id", String(40), primary_key=True),
    Column("session_id", String(100), primary_key=True),
    Column("agent_id", String(40), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("attended", Boolean, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("updated_at", UtcDateTime, nullable=False),
    Column("latest_device_uid", String(16)),
    Column("latest_capabilities", Text, nullable=False),
    Column("phone_device_uid", String(16)),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
)

session_messages = Table(
    "session_messages",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("user_id", String(40), primary_key=True),
    Column("session_id", String(100), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("device_uid", String(16)),
    Column("capabilities", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "user_id", "session_id"],
        ["sessions.tenant_id", "sessions.user_id", "sessions.session_id"],
        ondelete="CASCADE",
    ),
)

invocations = Table(
    "invocations",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("invocation_id", String(64), primary_key=True),
    Column("user_id", String(40), primary_key=True),  # an id is its user's own
    Column("agent_id", String(40), nullable=False),
    Column("device_uid", String(16), nullable=False),
    Column("device_id", String(24), nullable=False),
    Column("tool", String(64), nullable=False),
    Column("capability", String(30), nullable=False),
    Column("arguments", Text, nullable=False),
    Column("arguments_sha256", String(64), nullable=False),
    Column("status", String(20), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("session_id", String(100)),
    Column("run_id", String(100)),
    Column("origin", String(16), nullable=False),
    Column("delivered_at", UtcDateTime),
    Column("resolved_at", UtcDateTime),
    Column("message", Text),
    Column("late_status", String(20)),
    Column("late_message", Text),
    Column("late_at", UtcDateTime),
    Column("reason", Text),  # why a call that waited for the person ended refused
    Column("binding_code", String(8)),
    Column("approval_id", String(40)),
    Column("mandate_id", String(40)),  # the standing mandate that let it through without an approval
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
    Index("invocations_device_status", "tenant_id", "device_uid", "status", "created_at"),
    Index("invocations_open_deadline", "status", "expires_at"),
)

events = Table(
    "events",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("user_id", String(40), nullable=False),
    Column("type", String(40), nullable=False),
    Column("data", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    Index("events_user_seq", "tenant_id", "user_id", "seq"),
)

# Written where a writer found the tenant's chain head taken by another transaction (PostgreSQL only):
# the entry waits here, in commit order of its key, until whoever holds the head next seals it into
# ``audit_entries`` or ``events`` (adapters/store/sql_journal.py). No writer waits for another's head.
_PENDING_KEY = BigInteger().with_variant(Integer(), "sqlite")  # SQLite: a rowid, as Identity() is not

audit_pending = Table(
    "audit_pending",
    metadata,
    Column("key", _PENDING_KEY, Identity(), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("at", UtcDateTime, nullable=False),
    Column("action", String(60), nullable=False),
    Column("actor", String(120), nullable=False),
    Column("outcome", String(30), nullable=False),
    Column("subject", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("data", Text, nullable=False),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
    Index("audit_pending_tenant", "tenant_id", "key"),
)

events_pending = Table(
    "events_pending",
    metadata,
    Column("key", _PENDING_KEY, Identity(), primary_key=True),
    Column("tenant_id", String(40), nullable=False),
    Column("user_id", String(40), nullable=False),
    Column("type", String(40), nullable=False),
    Column("data", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    Index("events_pending_tenant", "tenant_id", "key"),
)

push_outbox = Table(
    "push_outbox",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("delivery_id", String(40), primary_key=True),
    Column("device_uid", String(16), nullable=False),
    Column("event", String(40), nullable=False),
    Column("subject_id", String(64), nullable=False),  # the invocation, approval or notice it announces
    Column("status", String(16), nullable=False),  # queued, sent, skipped, coalesced, capped, failed
    Column("attempts", Integer, nullable=False),
    Column("not_before", UtcDateTime, nullable=False),
    Column("claimed_until", UtcDateTime),
    Column("created_at", UtcDateTime, nullable=False),
    Column("finished_at", UtcDateTime),
    Column("user_id", String(40), nullable=False),  # the device's person: the push caps count per user
    Column("pushed_at", UtcDateTime),  # when the attempt in flight (or the one sent) went out
    # A notice's ids and flags, and its words where notice_text is on; emptied once the row is finished.
    Column("payload", Text),
    Column("last_error", String(200)),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
    Index("push_outbox_due", "status", "not_before"),
    Index("push_outbox_user_pushed", "tenant_id", "user_id", "pushed_at"),
    Index("push_outbox_device_pushed", "tenant_id", "device_uid", "pushed_at"),
)

approvals = Table(
    "approvals",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("approval_id", String(40), primary_key=True),
    Column("user_id", String(40), nullable=False),
    Column("agent_id", String(40), nullable=False),
    Column("invocation_id", String(64)),  # none for an approval no call waits on (device_pair, console_login)
    Column("kind", String(30), nullable=False),
    Column("subject", String(24), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("preview", Text, nullable=False),
    Column("sign_format", String(40), nullable=False),
    Column("challenge", String(32), nullable=False),
    Column("sign_expires_at", BigInteger, nullable=False),
    Column("action_sha256", String(64), nullable=False),
    Column("algorithms", String(40), nullable=False),
    Column("binding_code", String(8), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("decided_at", UtcDateTime),
    Column("decided_by", String(80)),
    Column("tool", String(64)),
    Column("arguments", Text),  # the planned action's exact arguments, so a phone recomputes its hash
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    ForeignKeyConstraint(
        ["tenant_id", "invocation_id", "user_id"],
        ["invocations.tenant_id", "invocations.invocation_id", "invocations.user_id"],
        ondelete="CASCADE",
    ),
    Index("approvals_user_status", "tenant_id", "user_id", "status"),
)

agent_pauses = Table(
    "agent_pauses",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("user_id", String(40), primary_key=True),
    Column("agent_id", String(40), primary_key=True),
    Column("until", UtcDateTime, nullable=False),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
)

ingest_receipts = Table(
    "ingest_receipts",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("device_uid", String(16), primary_key=True),
    Column("channel", String(16), primary_key=True),
    Column("digest", String(64), primary_key=True),
    Column("receipt_id", String(40), nullable=False),
    Column("received_at", UtcDateTime, nullable=False),  # the device's word, used only in the digest
    Column("accepted_at", UtcDateTime, nullable=False),
    Column("session_id", String(100), nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
)

ingest_counters = Table(
    "ingest_counters",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("device_uid", String(16), primary_key=True),
    Column("day", String(10), primary_key=True),  # the server's UTC day
    Column("count", Integer, nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
)

triage_sessions = Table(
    "triage_sessions",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("device_uid", String(16), primary_key=True),
    Column("channel", String(16), primary_key=True),
    Column("user_id", String(40), nullable=False),
    Column("session_id", String(100), nullable=False),
    Column("last_message_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
    ForeignKeyConstraint(
        ["tenant_id", "user_id", "session_id"],
        ["sessions.tenant_id", "sessions.user_id", "sessions.session_id"],
        ondelete="CASCADE",
    ),
)

console_sign_ins = Table(
    "console_sign_ins",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("sign_in_id", String(16), primary_key=True),
    Column("kind", String(10), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("status", String(10), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("user_id", String(40)),
    Column("approval_id", String(40)),
    Column("browser", String(80), nullable=False),
    Column("address", String(45), nullable=False, server_default=""),
    Column("approver_uid", String(16)),
    Column("approver_id", String(24)),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    Index("console_sign_ins_expiry", "tenant_id", "expires_at"),
)

console_sessions = Table(
    "console_sessions",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("session_id", String(16), primary_key=True),
    Column("user_id", String(40), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("via", String(10), nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("browser", String(80), nullable=False),
    Column("revoked_at", UtcDateTime),
    Column("approver_uid", String(16)),
    Column("approver_id", String(24)),
    Column("last_used_at", UtcDateTime),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    Index("console_sessions_user", "tenant_id", "user_id"),
    Index("console_sessions_approver", "tenant_id", "approver_uid"),
)

# Passkeys: a device's WebAuthn credentials (the COSE public key, base64url) and its count.
passkeys = Table(
    "passkeys",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("credential_id", String(1400), primary_key=True),  # base64url of up to 1023 bytes
    Column("device_uid", String(16), nullable=False),
    Column("user_id", String(40), nullable=False),
    Column("public_key", Text, nullable=False),
    Column("sign_count", BigInteger, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(
        ["tenant_id", "device_uid"], ["devices.tenant_id", "devices.device_uid"], ondelete="CASCADE"
    ),
    Index("passkeys_device", "tenant_id", "device_uid"),
)

# A user's own require_user_verification, over the global setting.
passkey_users = Table(
    "passkey_users",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("user_id", String(40), primary_key=True),
    Column("required", Boolean, nullable=False),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
)

# Standing mandates: the person's signed bounds for calls an agent may make without asking each time.
mandates = Table(
    "mandates",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("mandate_id", String(40), primary_key=True),
    Column("user_id", String(40), nullable=False),
    Column("agent_id", String(40)),  # NULL: any agent of the user
    Column("tools", Text, nullable=False),  # JSON list
    Column("constraints", Text, nullable=False),  # JSON object
    Column("max_calls", Integer, nullable=False),
    Column("per_day", Integer),
    Column("purpose", Text, nullable=False),
    Column("created_at", UtcDateTime, nullable=False),
    Column("expires_at", UtcDateTime, nullable=False),
    Column("sign_until", UtcDateTime, nullable=False),
    Column("status", String(20), nullable=False),
    Column("approval_id", String(40)),
    Column("used", Integer, nullable=False),
    Column("used_today", Integer, nullable=False),
    Column("day", String(10), nullable=False),
    Column("decided_at", UtcDateTime),
    Column("decided_by", String(200)),
    ForeignKeyConstraint(["tenant_id", "user_id"], ["users.tenant_id", "users.user_id"], ondelete="CASCADE"),
    Index("mandates_user", "tenant_id", "user_id", "status"),
)

# Proofs: each tenant's Ed25519 issuer keys (the newest signs; every one stays published), and what a
# device signed to decide an approval, so a proof can carry it.
issuer_keys = Table(
    "issuer_keys",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("kid", String(64), primary_key=True),  # the RFC 7638 thumbprint
    Column("private_jwk", Text, nullable=False),  # secret: never logged, never served
    Column("created_at", UtcDateTime, nullable=False),
    ForeignKeyConstraint(["tenant_id"], ["tenants.tenant_id"], ondelete="CASCADE"),
)

approval_signatures = Table(
    "approval_signatures",
    metadata,
    Column("tenant_id", String(40), primary_key=True),
    Column("approval_id", String(40), primary_key=True),
    Column("device_id", String(24), nullable=False),
    Column("alg", String(16), nullable=False),
    Column("public_key", Text, nullable=False),  # the device's key as enrolled, base64
    Column("signature", String(200), nullable=False),  # as the device sent it
    ForeignKeyConstraint(
        ["tenant_id", "approval_id"], ["approvals.tenant_id", "approvals.approval_id"], ondelete="CASCADE"
    ),
)

TENANT_TABLES = tuple(t.name for t in metadata.sorted_tables)
APPEND_ONLY_TABLES = ("audit_entries",)
