"""The one error tree of tapgate; every class has a stable ``code``.

    TapgateError
    ├── InvalidInput            422  a field is wrong (names the field)
    │   ├── MalformedRequest    400  the body is not what the route reads
    │   │   └── BoundsRefused        an asked-for mandate out of bounds
    │   └── TooLongToShow            arguments too long to show the person whole
    ├── Unauthenticated         401  no token, or one tapgate does not know
    ├── Forbidden               403  the token lacks the kind or scope
    │   ├── ComparisonMismatch       a pairing's comparison code did not match
    │   ├── SignatureRefused         a decision's signature does not verify
    │   └── PasskeyRefused           a decision that needs a passkey came without a good one
    ├── NotFound                404  unknown, or not yours: the two are never told apart
    ├── Conflict                409  the thing exists, or was already decided
    │   ├── DuplicateInvocation      a concurrent replay wrote the invocation id first
    │   └── AlreadyAnswered          a second answer to a call; carries the first
    ├── Gone                    410  it expired
    ├── TooLarge                413  the body is over the limit
    ├── RateLimited             429  a cap or a rate; carries ``retry_after`` seconds
    ├── ConfigurationError      500  settings that the process refuses to start with
    │   └── PolicyFileError          the policies file does not parse (names the line)
    ├── StorageError            503  the database failed; its details never reach a log or a client
    ├── PhoneActionRefused           a phone action the catalogue refuses (the agent reads why)
    ├── SecretRefused                an outbound text that looks like a secret
    ├── PushFailed                   a push service did not take a message (``retryable``)
    │   └── SubscriptionGone         the device's push address is dead
    ├── RelayVerificationError       a push relay's message does not verify
    ├── GatewayUnreachable           the gateway behind ``tapgate mcp`` does not answer
    ├── BrokenChain                  a tenant's audit journal does not verify (names the entry)
    ├── VectorsError                 a signature vectors document does not check
    └── ProofRefused                 a proof that does not verify (names the first check that failed)

The edges map these families to HTTP statuses and MCP errors by class; a class without a status of its
own takes its family's (500 for those at the root, which the check chain and the workers turn into
answers of their own before any reaches a client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tapgate.domain.invocations import Invocation
    from tapgate.domain.secret_scan import SecretFinding

TOO_LONG = "too long to show the person"
RefusalReason = Literal["unknown_action", "missing", "bad"]  # why a phone action is refused


class TapgateError(Exception):
    """Base of every error tapgate raises on purpose."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(TapgateError):
    code = "invalid"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class MalformedRequest(InvalidInput):
    code = "malformed"

    def __init__(self, message: str) -> None:
        super().__init__("body", message)


class TooLongToShow(InvalidInput):
    """A preview the person could not read whole; the call it was for is refused."""

    def __init__(self) -> None:
        super().__init__("arguments", f"The arguments are {TOO_LONG}.")


class BoundsRefused(MalformedRequest):
    """An asked-for mandate out of bounds (400): ``message`` says which and why."""

    code = "invalid"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class Unauthenticated(TapgateError):
    code = "unauthenticated"


class Forbidden(TapgateError):
    code = "forbidden"


class ComparisonMismatch(Forbidden):
    """The comparison code typed at pairing is not the one the device shows."""

    code = "comparison_mismatch"


class SignatureRefused(Forbidden):
    """A signature that does not verify. The client gets one message whatever the reason; ``detail``
    ("bad signature", "malformed DER", "wrong length", …) is for the audit journal only."""

    code = "signature_refused"
    MESSAGE = "The signature does not verify for this approval and decision."

    def __init__(self, detail: str) -> None:
        super().__init__(self.MESSAGE)
        self.detail = detail


class PasskeyRefused(Forbidden):
    """A decision without a good passkey assertion (403; the approval stays pending). ``detail`` is for
    the journal only."""

    code = "passkey_refused"
    MESSAGE = (
        "This decision needs your passkey: confirm it with your face, fingerprint or screen lock on a "
        "device you registered a passkey on."
    )

    def __init__(self, detail: str) -> None:
        super().__init__(self.MESSAGE)
        self.detail = detail


class NotFound(TapgateError):
    code = "not_found"


class Conflict(TapgateError):
    code = "conflict"


class DuplicateInvocation(Conflict):
    """An invocation id written by a concurrent replay: the replay reads that row instead."""


class AlreadyAnswered(Conflict):
    """A second answer: 409, carrying the first."""

    def __init__(self, first: Invocation) -> None:
        super().__init__(
            f"This invocation was answered already ({first.status.value}); the first answer stands."
        )
        self.first = first


class Gone(TapgateError):
    code = "gone"


class TooLarge(TapgateError):
    code = "too_large"


class RateLimited(TapgateError):
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ConfigurationError(TapgateError):
    code = "configuration"


class PolicyFileError(ConfigurationError):
    """The policies file cannot be used; the server refuses to start with this message."""

    code = "policy_file"

    def __init__(self, source: str, line: int, reason: str) -> None:
        super().__init__(f"{source} line {line}: {reason}")
        self.source = source
        self.line = line
        self.reason = reason


class ProofRefused(TapgateError):
    """A proof that does not verify; the message names the first check that failed."""

    code = "proof_refused"


class StorageError(TapgateError):
    code = "storage"


class PhoneActionRefused(TapgateError):
    """A phone_action call the catalogue refuses; ``text`` is the refusal the agent reads, word for word.

    ``reason`` (``unknown_action``, ``missing`` or ``bad``) and ``field`` are for the audit journal: the
    text never repeats a value from the call.
    """

    code = "phone_action_invalid"

    def __init__(self, text: str, reason: RefusalReason, field: str | None = None) -> None:
        super().__init__(text)
        self.text = text
        self.reason: RefusalReason = reason
        self.field = field


class SecretRefused(TapgateError):
    """An outbound text looks like a secret; the check chain turns this into a ``[deny]`` refusal."""

    code = "secret_in_text"

    def __init__(self, field: str, finding: SecretFinding) -> None:
        super().__init__(
            f"[deny] the text of '{field}' looks like a secret ({finding.kind}); tapgate never sends secrets"
        )
        self.field = field
        self.finding = finding


class PushFailed(TapgateError):
    """A push service did not take a message; ``retryable`` says whether to try again."""

    code = "push_failed"

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class SubscriptionGone(PushFailed):
    """The push service says the address is dead (Web Push 404/410, APNs 410, FCM UNREGISTERED)."""

    code = "push_subscription_gone"

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class RelayVerificationError(TapgateError):
    """The message is refused. ``reason`` is one of: ``missing_header``, ``bad_timestamp``,
    ``bad_signature``, ``stale``, ``future``, ``replayed``, ``bad_body``."""

    code = "relay_verification_failed"

    def __init__(self, reason: str) -> None:
        super().__init__(f"The relay message is refused: {reason}.")
        self.reason = reason


class GatewayUnreachable(TapgateError):
    """The gateway behind ``tapgate mcp`` did not answer."""

    code = "gateway_unreachable"


class BrokenChain(TapgateError):
    """The journal of a tenant does not verify; ``seq`` is the first entry that fails."""

    code = "broken_chain"

    def __init__(self, tenant_id: str, seq: int, why: str) -> None:
        super().__init__(f"tenant {tenant_id}: audit entry {seq} {why}")
        self.tenant_id = tenant_id
        self.seq = seq


class VectorsError(TapgateError):
    """A vectors document does not check; ``case`` is the index of the first failing case (None when the
    document itself is at fault) and ``why`` says what failed."""

    code = "vectors"

    def __init__(self, case: int | None, why: str) -> None:
        super().__init__(why if case is None else f"case {case}: {why}")
        self.case = case
        self.why = why
