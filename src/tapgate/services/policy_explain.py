"""Explain a call's policy verdict against the live database, creating nothing (``tapgate policy explain``).

The call goes through the check chain's reads and its checks up to the rules (``check_chain``), as an
agent's call would: the device the tool names and the person's pause, the device and its capability,
the person's grant, then the rules in force in this process. A check before policy that would refuse
the call is reported as the verdict, in the words the agent would read, since the rules would never be
asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from tapgate.domain.check_chain import Refusal, Request
from tapgate.domain.devices import Device
from tapgate.domain.errors import InvalidInput, NotFound
from tapgate.domain.policy import UNTRUSTED, PolicyRequest
from tapgate.domain.policy_explain import Explanation, explain
from tapgate.domain.sessions import SessionKind
from tapgate.services import check_chain
from tapgate.services.context import Context


@dataclass(frozen=True, slots=True)
class Explained:
    """``refused`` names a check before policy that refuses the call; then ``explanation`` is None."""

    request: PolicyRequest | None
    device: Device | None
    refused: str = ""
    explanation: Explanation | None = None


async def explain_call(
    ctx: Context,
    tenant_id: str,
    user_id: str,
    tool: str,
    origin: str = "owner",
    session_kind: str = "",
    agent_id: str = "",
) -> Explained:
    """Raises NotFound for an unknown tenant or user, InvalidInput for an origin or session kind that
    no call can have."""
    if origin not in ("owner", UNTRUSTED):
        raise InvalidInput("origin", "--origin must be owner or untrusted.")
    kinds = [k.value for k in SessionKind]
    if session_kind and session_kind not in kinds:
        raise InvalidInput("session_kind", f"--session-kind must be one of {', '.join(kinds)}.")
    request = Request(tool, agent_id, origin=origin, session_kind=session_kind)
    now = ctx.clock.now()
    async with ctx.store.unit_of_work(tenant_id) as uow:
        if await uow.tenants.get() is None:
            raise NotFound(f"There is no tenant {tenant_id!r}.")
        if await uow.users.get(user_id) is None:
            raise NotFound(f"Tenant {tenant_id!r} has no user {user_id!r}.")
        try:
            _, passed = await check_chain.through(
                uow, ctx.policies, user_id, request, ctx.device_channel, now
            )
        except Refusal as refusal:
            return Explained(None, refusal.device, refusal.reason)
    return Explained(passed.request, passed.device, explanation=explain(ctx.policies, passed.request))
