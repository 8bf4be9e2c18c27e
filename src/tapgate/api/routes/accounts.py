"""Users and their tokens (operator only)."""

from __future__ import annotations

from fastapi import APIRouter

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import NewToken, NewUser, TokenView, UserView
from tapgate.domain.principals import TokenKind

router = APIRouter(prefix="/v1/users", tags=["users"])


@router.post("", status_code=201, response_model=UserView, summary="Add a person to the tenant (operator)")
async def create_user(body: NewUser, caller: Caller, gw: GatewayDep) -> UserView:
    user = await gw.create_user(caller, body.user_id, body.display_name)
    return UserView(user_id=user.user_id, display_name=user.display_name)


@router.post(
    "/{user_id}/tokens",
    status_code=201,
    response_model=TokenView,
    summary="Mint a user or agent token bound to this user (operator)",
)
async def create_token(user_id: str, body: NewToken, caller: Caller, gw: GatewayDep) -> TokenView:
    new = await gw.create_token(
        caller,
        user_id,
        TokenKind(body.kind),
        body.scopes,
        body.agent_id,
        body.require_device_signature,
        body.expires_in_seconds,
        body.agent_name,
    )
    return TokenView(
        token=new.token,
        token_id=new.credential_id,
        kind=new.kind.value,
        scopes=sorted(new.scopes),
        expires_at=new.expires_at,
    )
