"""Request and response bodies of the HTTP API; requests refuse unknown fields and wrong types."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
    require_device_signature: bool | None = None


class TokenView(BaseModel):
    token: str = Field(description="Shown once; tapgate keeps only its hash.")
    kind: str
    scopes: list[str]


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
