"""The one error tree of tapgate; every class has a stable ``code``.

    TapgateError
    ├── InvalidInput            422  a field is wrong (names the field)
    │   └── MalformedRequest    400  the body is not what the route reads
    ├── Unauthenticated         401  no token, or one tapgate does not know
    ├── Forbidden               403  the token lacks the kind or scope, or a signature is refused
    ├── NotFound                404  unknown, or not yours: the two are never told apart
    ├── Conflict                409  the thing exists, or was already decided
    │   └── DuplicateInvocation      a concurrent replay wrote the invocation id first
    ├── Gone                    410  it expired
    ├── TooLarge                413  the body is over the limit
    ├── RateLimited             429  a cap or a rate; carries ``retry_after`` seconds
    ├── ConfigurationError           settings that the process refuses to start with
    ├── ProofRefused                 a proof that does not verify (the message: the first check that failed)
    └── StorageError                 the database failed; its details never reach a log or a client

The edges map these families to HTTP statuses and MCP errors by class.
"""

from __future__ import annotations


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


class Unauthenticated(TapgateError):
    code = "unauthenticated"


class Forbidden(TapgateError):
    code = "forbidden"


class NotFound(TapgateError):
    code = "not_found"


class Conflict(TapgateError):
    code = "conflict"


class DuplicateInvocation(Conflict):
    """An invocation id written by a concurrent replay: the replay reads that row instead."""


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


class ProofRefused(TapgateError):
    code = "proof_refused"


class StorageError(TapgateError):
    code = "storage"
