"""The phone's side of an approval: check that the action hash covers what the card shows (the preview and
the exact arguments of the inbox item), rebuild the signed text and sign the decision."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tapgate.device.keyfile import algorithm_of
from tapgate.domain.approvals import Decision, PrivateKey, action_sha256, sign_decision, signed_text
from tapgate.domain.errors import InvalidInput

__all__ = ["CannotSign", "check_action", "decision_body", "payload_for"]


class CannotSign(Exception):
    """An inbox item this key cannot sign (a missing field, a line that is not one, another algorithm)."""


def payload_for(approval: Mapping[str, Any], decision: Decision | str) -> str:
    """The exact text to sign for ``approval`` (an item of ``GET /v1/inbox``) and ``decision``, under the
    format name its sign block carries. Raises CannotSign."""
    sign = approval.get("sign")
    if not isinstance(sign, Mapping):
        raise CannotSign("the approval has no sign block")
    try:
        return signed_text(
            sign["format"], approval["id"], decision, approval["kind"], approval["subject"],
            sign["action_sha256"], sign["challenge"], sign["expires_at"],
        )  # fmt: skip
    except KeyError as e:
        raise CannotSign(f"the approval lacks {e.args[0]!r}") from None
    except InvalidInput as e:
        raise CannotSign(e.message) from None


def check_action(approval: Mapping[str, Any]) -> None:
    """Recompute ``sign.action_sha256`` from the item's tool, subject (the device), kind (the capability),
    exact arguments and preview. Raises CannotSign when it differs: what the card shows is not what the
    signature would cover."""
    sign, arguments, preview = approval.get("sign"), approval.get("arguments"), approval.get("preview")
    if not (isinstance(sign, Mapping) and isinstance(arguments, Mapping) and isinstance(preview, Mapping)):
        raise CannotSign("the approval lacks the arguments or the preview its action hash covers")
    try:
        recomputed = action_sha256(
            str(approval.get("tool", "")), str(approval.get("subject", "")), str(approval.get("kind", "")),
            arguments, preview,
        )  # fmt: skip
    except InvalidInput as e:
        raise CannotSign(e.message) from None
    if recomputed != sign.get("action_sha256"):
        raise CannotSign("the action hash does not match what the card shows; not signed")


def decision_body(
    key: PrivateKey,
    device_id: str,
    approval: Mapping[str, Any],
    decision: Decision | str,
    message: str | None = None,
    not_me: bool = False,
) -> dict[str, Any]:
    """The body of ``POST /v1/approvals/{id}``: the decision signed by ``key`` for ``device_id``.

    Raises CannotSign when the action hash does not cover what the card shows, or the sign block does
    not offer this key's algorithm or cannot be rebuilt."""
    check_action(approval)
    alg = str(algorithm_of(key))
    sign = approval.get("sign")
    offered = sign.get("algorithms") if isinstance(sign, Mapping) else None
    if isinstance(offered, list) and alg not in offered:
        raise CannotSign(f"the approval takes {', '.join(map(str, offered))} signatures; this key is {alg}")
    body: dict[str, Any] = {
        "decision": str(decision),
        "device_id": device_id,
        "signature": sign_decision(key, payload_for(approval, decision)),
    }
    if message:
        body["message"] = message
    if not_me:
        body["not_me"] = True
    return body
