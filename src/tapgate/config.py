"""Settings from ``tapgate.toml`` and ``TAPGATE_*`` variables (the environment wins), read once at the edge.

A relative SQLite path, policies file or push key file is taken relative to the settings file's folder, so
a deployment folder can be moved as a whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tapgate.domain.errors import ConfigurationError
from tapgate.domain.invocations import MAX_WAIT_SECONDS
from tapgate.services.context import Limits
from tapgate.validation_messages import sentence

DEFAULT_FILE = "tapgate.toml"
WAKES = ("local", "postgres", "nats")
PUBLIC_URL_MAX = 200  # an audit entry's subject and ids hold at most this
LIMITS = Limits()  # the defaults of the settings that become the gateway's limits, defined there once


class WebPushSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vapid_private_key: str = ""
    subject: str = "mailto:admin@example.com"
    # The push services a browser's subscription may point at (a leading '.' admits subdomains): the
    # gateway posts to no other host, whatever a subscription says.
    hosts: list[str] = Field(
        default_factory=lambda: [
            "fcm.googleapis.com",
            "android.googleapis.com",
            "updates.push.services.mozilla.com",
            "web.push.apple.com",
            ".notify.windows.com",
        ],
        max_length=100,
    )


class ApnsSettings(BaseModel):
    """Apple's push service with token authentication; on when ``private_key_file`` is set."""

    model_config = ConfigDict(extra="forbid")

    team_id: str = ""
    key_id: str = ""
    private_key_file: str = ""  # the .p8 key Apple issued (PEM)
    topic: str = ""  # the app's bundle id
    endpoint: str = "https://api.push.apple.com"  # https://api.sandbox.push.apple.com for development

    @property
    def enabled(self) -> bool:
        return bool(self.private_key_file)

    @model_validator(mode="after")
    def _complete(self) -> ApnsSettings:
        if self.enabled:
            missing = [k for k in ("team_id", "key_id", "topic") if not getattr(self, k)]
            if missing:
                raise ValueError("APNs needs " + ", ".join(missing) + " beside private_key_file")
        return self


class FcmSettings(BaseModel):
    """Firebase Cloud Messaging (HTTP v1) as a service account; on when ``service_account_file`` is set."""

    model_config = ConfigDict(extra="forbid")

    project_id: str = ""
    service_account_file: str = ""  # the service account's JSON key file
    endpoint: str = "https://fcm.googleapis.com"

    @property
    def enabled(self) -> bool:
        return bool(self.service_account_file)

    @model_validator(mode="after")
    def _complete(self) -> FcmSettings:
        if self.enabled and not self.project_id:
            raise ValueError("FCM needs project_id beside service_account_file")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="TAPGATE_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    database_url: str = "sqlite:///./tapgate.db"
    admin_database_url: str = ""
    device_channel_enabled: bool = False
    device_sms_enabled: bool = False
    public_url: str = ""  # empty: the address `tapgate serve` listens on (see tapgate.listening)
    tls_cert: str = ""  # a PEM certificate (chain) file: `serve` speaks https and wss
    tls_key: str = ""  # its PEM private key file
    # with tls_cert: plain HTTP on this port serves the /tls page and redirects the rest to https (0: off)
    http_port: int = Field(8080, ge=0, le=65535)
    policies_file: str = ""
    invocation_timeout_seconds: int = Field(LIMITS.invocation_timeout_seconds, ge=1, le=86_400)
    device_call_timeout_seconds: int = Field(LIMITS.device_call_timeout_seconds, ge=1, le=600)
    ingest_daily_cap: int = Field(LIMITS.ingest_daily_cap, ge=0, le=1_000_000)
    approval_sign_ttl_seconds: int = Field(LIMITS.approval_sign_ttl_seconds, ge=30, le=86_400)
    max_devices_per_user: int = Field(LIMITS.max_devices_per_user, ge=1, le=1000)
    max_open_confirmations: int = Field(LIMITS.max_open_confirmations, ge=1, le=1000)
    invocation_poll_seconds: float = Field(LIMITS.invocation_poll_seconds, gt=0, le=60)
    live_ack_seconds: float = Field(LIMITS.live_ack_seconds, ge=0, le=60)
    # How long `tapgate serve` keeps an idle HTTP connection open for the next request (uvicorn's
    # timeout_keep_alive). Above the 5 s after which httpx clients drop an idle connection themselves
    # (uvicorn's own default is also 5: the two raced, and a request met a connection as the server
    # closed it); tapgate's clients also send such a request once more (tapgate.dropped).
    keep_alive_seconds: float = Field(10, ge=0, le=300)
    redelivery_seconds: float = Field(LIMITS.redelivery_seconds, ge=0, le=3600)
    triage_idle_seconds: int = Field(LIMITS.triage_idle_seconds, ge=60, le=7 * 86_400)
    not_me_cooldown_seconds: int = Field(LIMITS.not_me_cooldown_seconds, ge=0, le=7 * 86_400)
    require_device_signature: bool = LIMITS.require_device_signature
    require_user_verification: bool = LIMITS.require_user_verification
    notice_text: bool = LIMITS.notice_text
    notice_life_seconds: int = Field(
        LIMITS.notice_life_seconds, ge=60, le=30 * 86_400
    )  # a notice waits for a link this long
    relay_secret: str = ""
    push_relays: dict[str, str] = Field(default_factory=dict)
    webpush: WebPushSettings = Field(default_factory=WebPushSettings)
    apns: ApnsSettings = Field(default_factory=ApnsSettings)
    fcm: FcmSettings = Field(default_factory=FcmSettings)
    push_cap: int = Field(LIMITS.push_cap, ge=1, le=10_000)  # pushes per user per push_window_seconds
    push_window_seconds: int = Field(LIMITS.push_window_seconds, ge=1, le=86_400)
    push_coalesce_seconds: float = Field(LIMITS.push_coalesce_seconds, ge=0, le=600)
    push_retry_seconds: list[float] = Field(
        default_factory=lambda: list(LIMITS.push_retry_seconds), max_length=10
    )
    push_lease_seconds: float = Field(LIMITS.push_lease_seconds, ge=1, le=3600)
    push_sweep_seconds: float = Field(LIMITS.push_sweep_seconds, gt=0, le=600)
    max_body_bytes: int = Field(65_536, ge=1024, le=16 * 1024 * 1024)
    # Bounded resources, so one client cannot exhaust the server: a request's head, how long it may take,
    # a WebSocket frame, and the streams (long-polls, event streams, device links) one token may hold open
    # at once in a process.
    max_header_bytes: int = Field(16_384, ge=1024, le=1024 * 1024)
    header_timeout_seconds: float = Field(10.0, gt=0, le=300)
    ws_max_frame_bytes: int = Field(65_536, ge=1024, le=16 * 1024 * 1024)
    max_streams_per_credential: int = Field(8, ge=1, le=10_000)
    # Work before a request is whole: its body arrives within body_timeout_seconds of its head, or 408;
    # a process holds at most max_connections connections (HTTP and WebSocket), the next gets 503.
    body_timeout_seconds: float = Field(30.0, gt=0, le=3600)
    max_connections: int = Field(10_000, ge=1, le=1_000_000)
    retention_days: int = Field(
        LIMITS.retention_days, ge=1, le=36_500
    )  # message bodies are erased after this many days
    console_agent_token_days: int = Field(
        LIMITS.console_agent_token_days, ge=1, le=3650
    )  # an agent token made in the console expires
    console_sign_ins_per_address: int = Field(
        LIMITS.console_sign_ins_per_address, ge=1, le=10_000
    )  # open console sign-ins per address
    mcp_wait_seconds: float = Field(60, ge=0, le=MAX_WAIT_SECONDS)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # How a change committed by one gateway process wakes the waiters of the others: "local"
    # (one process), "postgres" (LISTEN/NOTIFY) or "nats" (a NATS broker at nats_url). Empty: local on
    # SQLite, postgres on PostgreSQL.
    wake: str = ""
    nats_url: str = "nats://127.0.0.1:4222"
    # How a gateway proves itself to the NATS server (a user and password, a token, or an NKey seed
    # file) and the TLS it speaks: the CA that signed the server's certificate, a client certificate.
    # Secrets go in TAPGATE_NATS_PASSWORD or TAPGATE_NATS_TOKEN rather than the file; none is logged.
    nats_user: str = ""
    nats_password: str = Field("", repr=False)
    nats_token: str = Field("", repr=False)
    nats_nkey_seed_file: str = ""
    nats_tls_ca_file: str = ""
    nats_tls_cert_file: str = ""
    nats_tls_key_file: str = ""

    @field_validator("push_relays")
    @classmethod
    def _relays_are_push_kinds(cls, relays: dict[str, str]) -> dict[str, str]:
        for kind in relays:
            where_it_belongs = _misplaced(("push_relays", kind))
            if where_it_belongs:
                raise ValueError(f"{kind} {where_it_belongs}")
        return relays

    @model_validator(mode="after")
    def _wake_is_known(self) -> Settings:
        if self.wake not in ("", *WAKES):
            raise ValueError(f"wake is one of {', '.join(WAKES)} (got {self.wake!r})")
        if self.wake == "postgres" and not self.database_url.startswith(("postgresql", "postgres:")):
            raise ValueError('wake = "postgres" needs a PostgreSQL database_url; use "local" on SQLite')
        if self.wake == "nats" and not self.nats_url.startswith(("nats://", "tls://")):
            raise ValueError("nats_url is a nats:// (or tls://) URL, like nats://127.0.0.1:4222")
        if bool(self.nats_user) != bool(self.nats_password):
            raise ValueError("nats_user and nats_password go together: set both, or neither")
        ways = [bool(self.nats_user), bool(self.nats_token), bool(self.nats_nkey_seed_file)]
        if sum(ways) > 1:
            raise ValueError(
                "NATS takes one way in: nats_user and nats_password, nats_token, or nats_nkey_seed_file"
            )
        if bool(self.nats_tls_cert_file) != bool(self.nats_tls_key_file):
            raise ValueError("nats_tls_cert_file and nats_tls_key_file go together: set both, or neither")
        return self

    @property
    def wake_kind(self) -> str:
        """The wake in use: the setting, or the default for the database."""
        if self.wake:
            return self.wake
        return "postgres" if self.database_url.startswith(("postgresql", "postgres:")) else "local"

    @model_validator(mode="after")
    def _flags_are_paired(self) -> Settings:
        if self.device_channel_enabled != self.device_sms_enabled:
            raise ValueError(
                "device_channel_enabled and device_sms_enabled are paired: set both to true, or both to "
                "false (TAPGATE_DEVICE_CHANNEL_ENABLED and TAPGATE_DEVICE_SMS_ENABLED)"
            )
        return self

    @model_validator(mode="after")
    def _relays_are_signed(self) -> Settings:
        if self.push_relays and not self.relay_secret:
            raise ValueError("push_relays needs relay_secret: relays refuse a message they cannot verify")
        if any(wait < 0 for wait in self.push_retry_seconds):
            raise ValueError("push_retry_seconds are waits in seconds: none may be negative")
        return self

    @model_validator(mode="after")
    def _addresses_are_whole(self) -> Settings:
        if self.public_url and not self.public_url.startswith(("http://", "https://")):
            raise ValueError("public_url must start with https:// (or http://), like https://tapgate.example")
        if len(self.public_url) > PUBLIC_URL_MAX:  # it is journalled when the gateway moves
            raise ValueError(f"public_url must be at most {PUBLIC_URL_MAX} characters")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key go together: set both, or neither")
        return self

    @property
    def devices_enabled(self) -> bool:
        return self.device_channel_enabled and self.device_sms_enabled

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file comes from model_config["toml_file"], set by load_settings on a subclass.
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)


def config_path(explicit: str | None = None) -> Path | None:
    """The settings file to read: ``--config``, else TAPGATE_CONFIG, else ./tapgate.toml if present."""
    named = explicit or os.environ.get("TAPGATE_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise ConfigurationError(f"The settings file {named} does not exist; run 'tapgate init' first.")
        return path
    default = Path(DEFAULT_FILE)
    return default if default.is_file() else None


def load_settings(explicit: str | None = None, **overrides: Any) -> Settings:
    """Read and check the settings once. Raises ConfigurationError naming the key and the reason."""
    path = config_path(explicit)
    where = f"{path} and the TAPGATE_* variables" if path else "the TAPGATE_* variables"
    try:
        settings = _reading(path)(**overrides)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"]) or "settings"
            where_it_belongs = _misplaced(err["loc"])
            if where_it_belongs:
                problems.append(f"{key}: {where_it_belongs}")
            elif err["type"] == "extra_forbidden":
                problems.append(f"{key}: is not a tapgate setting (check its spelling)")
            else:
                problems.append(sentence(err["type"], key, err).removesuffix("."))
        raise ConfigurationError(f"Bad settings in {where}: " + "; ".join(problems) + ".") from e
    except ValueError as e:  # a settings file that is not valid TOML
        raise ConfigurationError(f"{path} is not valid TOML: {e}.") from e
    return _anchor_paths(settings, path.parent if path else Path.cwd())


def _tables() -> dict[str, type[BaseModel]]:
    """The settings that are TOML tables of their own, by name, with the model of their keys."""
    tables: dict[str, type[BaseModel]] = {}
    for name, field in Settings.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            tables[name] = kind
    return tables


def _misplaced(loc: tuple[int | str, ...]) -> str | None:
    """Where a key that stands in the wrong place belongs, or None.

    In TOML every key after a ``[table]`` line belongs to that table, so a key appended to the end of
    the file that ``tapgate init`` wrote lands in its last table.
    """
    if not loc:
        return None
    name, tables = str(loc[-1]), _tables()
    if len(loc) == 2 and name in Settings.model_fields and name not in tables:
        return (
            f"is a top-level setting, but it stands under [{loc[0]}], where every key after that line "
            "belongs: move it above the file's first [table] line"
        )
    homes = [table for table, model in tables.items() if name in model.model_fields and table != loc[0]]
    if homes:
        return f"belongs in the [{homes[0]}] table: put it under the [{homes[0]}] line"
    return None


def _reading(path: Path | None) -> type[Settings]:
    if path is None:
        return Settings

    class FileSettings(Settings):
        model_config = SettingsConfigDict(toml_file=path)

    return FileSettings


def _anchor_paths(settings: Settings, base: Path) -> Settings:
    changes: dict[str, Any] = {}
    prefix = "sqlite:///"
    url = settings.database_url
    if url.startswith(prefix) and not url.startswith(prefix + "/") and ":memory:" not in url:
        changes["database_url"] = prefix + str((base / url[len(prefix) :]).resolve())
    if settings.policies_file and not Path(settings.policies_file).is_absolute():
        changes["policies_file"] = str((base / settings.policies_file).resolve())
    for key in (
        "tls_cert",
        "tls_key",
        "nats_nkey_seed_file",
        "nats_tls_ca_file",
        "nats_tls_cert_file",
        "nats_tls_key_file",
    ):
        value = getattr(settings, key)
        if value and not Path(value).is_absolute():
            changes[key] = str((base / value).resolve())
    apns, fcm = settings.apns.private_key_file, settings.fcm.service_account_file
    if apns and not Path(apns).is_absolute():
        changes["apns"] = settings.apns.model_copy(update={"private_key_file": str((base / apns).resolve())})
    if fcm and not Path(fcm).is_absolute():
        changes["fcm"] = settings.fcm.model_copy(update={"service_account_file": str((base / fcm).resolve())})
    return settings.model_copy(update=changes) if changes else settings
