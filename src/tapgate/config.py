"""Settings from ``tapgate.toml`` and ``TAPGATE_*`` variables (the environment wins), read once at the edge.

A relative SQLite path, policies file or push key file is taken relative to the settings file's folder, so
a deployment folder can be moved as a whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tapgate.domain.errors import ConfigurationError

DEFAULT_FILE = "tapgate.toml"


class WebPushSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    vapid_private_key: str = ""
    subject: str = "mailto:admin@example.com"


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
    public_url: str = "http://127.0.0.1:8080"
    policies_file: str = ""
    invocation_timeout_seconds: int = Field(300, ge=1, le=86_400)
    device_call_timeout_seconds: int = Field(10, ge=1, le=600)
    ingest_daily_cap: int = Field(500, ge=0, le=1_000_000)
    approval_sign_ttl_seconds: int = Field(3600, ge=30, le=86_400)
    max_devices_per_user: int = Field(10, ge=1, le=1000)
    max_open_confirmations: int = Field(5, ge=1, le=1000)
    invocation_poll_seconds: float = Field(2, gt=0, le=60)
    live_ack_seconds: float = Field(1.0, ge=0, le=60)
    redelivery_seconds: float = Field(30.0, ge=0, le=3600)
    triage_idle_seconds: int = Field(3600, ge=60, le=7 * 86_400)
    not_me_cooldown_seconds: int = Field(1200, ge=0, le=7 * 86_400)
    require_device_signature: bool = False
    notice_text: bool = False
    relay_secret: str = ""
    push_relays: dict[str, str] = Field(default_factory=dict)
    webpush: WebPushSettings = Field(default_factory=WebPushSettings)
    apns: ApnsSettings = Field(default_factory=ApnsSettings)
    fcm: FcmSettings = Field(default_factory=FcmSettings)
    push_cap: int = Field(10, ge=1, le=10_000)  # pushes per user per push_window_seconds
    push_window_seconds: int = Field(600, ge=1, le=86_400)
    push_coalesce_seconds: float = Field(5.0, ge=0, le=600)
    push_retry_seconds: list[float] = Field(default_factory=lambda: [2.0, 10.0], max_length=10)
    push_lease_seconds: float = Field(60.0, ge=1, le=3600)
    push_sweep_seconds: float = Field(5.0, gt=0, le=600)
    max_body_bytes: int = Field(65_536, ge=1024, le=16 * 1024 * 1024)
    mcp_wait_seconds: float = Field(60, ge=0, le=300)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

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
            reason = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                reason = "is not a tapgate setting (check its spelling)"
            problems.append(f"{key}: {reason}")
        raise ConfigurationError(f"Bad settings in {where}: " + "; ".join(problems) + ".") from e
    except ValueError as e:  # a settings file that is not valid TOML
        raise ConfigurationError(f"{path} is not valid TOML: {e}.") from e
    return _anchor_paths(settings, path.parent if path else Path.cwd())


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
    apns, fcm = settings.apns.private_key_file, settings.fcm.service_account_file
    if apns and not Path(apns).is_absolute():
        changes["apns"] = settings.apns.model_copy(update={"private_key_file": str((base / apns).resolve())})
    if fcm and not Path(fcm).is_absolute():
        changes["fcm"] = settings.fcm.model_copy(update={"service_account_file": str((base / fcm).resolve())})
    return settings.model_copy(update=changes) if changes else settings
