"""Tokens have a life: list them without their secrets, and revoke one. A console session
is listed and revoked with them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response

from tapgate.api.auth import Caller, GatewayDep
from tapgate.api.schemas import TokenInfo, TokenList
from tapgate.domain.accounts import ListedToken

router = APIRouter(tags=["tokens"])
TokenId = Annotated[str, Path(max_length=40, description="A token's id, as listed (not the token)")]


def _listed(listed: Sequence[ListedToken]) -> TokenList:
    return TokenList(
        tokens=[
            TokenInfo(
                token_id=c.token_id,
                kind=c.kind,
                user_id=c.user_id,
                agent_id=c.agent_id,
                scopes=sorted(c.scopes),
                created_at=c.created_at,
                expires_at=c.expires_at,
                last_used_at=c.last_used_at,
                signed_in_by=c.signed_in_by,
                console_session_id=c.console_session_id,
                agent_name=c.agent_name,
            )
            for c in listed
        ]
    )


@router.get(
    "/v1/users/{user_id}/tokens",
    response_model=TokenList,
    summary="The user's tokens and console sessions, without their secrets (operator, or that user)",
)
async def user_tokens(user_id: str, caller: Caller, gw: GatewayDep) -> TokenList:
    return _listed(await gw.list_user_tokens(caller, user_id))


@router.get(
    "/v1/tokens",
    response_model=TokenList,
    summary="The tenant's tokens and console sessions of a kind (operator)",
)
async def tenant_tokens(
    caller: Caller,
    gw: GatewayDep,
    kind: Annotated[Literal["operator", "user", "agent", "device", "console_session"] | None, Query()] = None,
) -> TokenList:
    return _listed(await gw.list_tokens(caller, kind))


@router.delete(
    "/v1/tokens/{token_id}",
    status_code=204,
    response_class=Response,
    summary=(
        "Revoke a token or console session now, in every process (operator; a user for their own user "
        "and agent tokens and console sessions)"
    ),
)
async def revoke_token(token_id: TokenId, caller: Caller, gw: GatewayDep) -> Response:
    await gw.revoke_token(caller, token_id)
    return Response(status_code=204)
