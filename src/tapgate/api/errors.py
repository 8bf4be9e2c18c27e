"""Every error leaves the API as ``{"error": {"code", "message"}}`` with the status of Appendix A."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tapgate.domain import errors as e
from tapgate.validation_messages import sentence

log = logging.getLogger(__name__)

STATUS: dict[type[e.TapgateError], int] = {
    e.MalformedRequest: 400,
    e.InvalidInput: 422,
    e.Unauthenticated: 401,
    e.Forbidden: 403,
    e.NotFound: 404,
    e.Conflict: 409,
    e.Gone: 410,
    e.TooLarge: 413,
    e.RateLimited: 429,
    e.StorageError: 503,
    e.ConfigurationError: 500,
}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def status_of(error: e.TapgateError) -> int:
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def _field(loc: tuple[Any, ...]) -> str:
    """``capabilities[0].name``: the field as a person would point at it in the JSON they sent."""
    named = ""
    for part in loc:
        if part in ("body", "query", "path", "header"):
            continue
        named += f"[{part}]" if isinstance(part, int) else (f".{part}" if named else str(part))
    return named or "body"


def describe_validation(
    errors: list[dict[str, Any]], content_type: str = "application/json"
) -> tuple[int, str, str]:
    """The status, code and sentence for FastAPI's validation errors: the first problem, field named."""
    first = errors[0]
    kind, field = first["type"], _field(tuple(first["loc"]))
    if kind == "json_invalid":
        return 400, "malformed", "The body is not valid JSON; send a JSON object."
    if field == "body" and kind in ("model_attributes_type", "dict_type", "model_type"):
        if "json" not in content_type:
            return 400, "malformed", "Send the body as JSON, with the header Content-Type: application/json."
        return 400, "malformed", "The body must be a JSON object."
    if kind == "missing":
        return 422, "invalid", f"{field} is required."
    if kind == "extra_forbidden":
        return 422, "invalid", f"{field} is not a field this request accepts; remove it."
    return 422, "invalid", sentence(kind, field, first)


def tapgate_error_response(error: e.TapgateError) -> JSONResponse:
    """The answer to a refusal: its status, code and sentence (a second answer also learns the first)."""
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, e.RateLimited) else None
    response = error_response(status_of(error), error.code, error.message, headers)
    first = getattr(error, "first", None)
    if first is not None:  # a second answer learns the first
        body = {
            "error": {"code": error.code, "message": error.message},
            "first": {"id": first.invocation_id, "status": first.status.value},
        }
        return JSONResponse(body, status_code=response.status_code)
    return response


def crash_response(error: Exception) -> JSONResponse:
    """The answer to a failure of tapgate's own, logged by class only: the message of a library error can
    quote request or row contents."""
    log.error("unhandled error", extra={"error": type(error).__name__})
    return error_response(500, "internal", "tapgate failed on this request; the server log has the error.")


def install(app: FastAPI) -> None:
    @app.exception_handler(e.TapgateError)
    async def _tapgate(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, e.TapgateError)
        return tapgate_error_response(error)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        content_type = request.headers.get("content-type", "")
        status, code, message = describe_validation(list(error.errors()), content_type)
        return error_response(status, code, message)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, HTTPException)
        if error.status_code == 404:
            return error_response(404, "not_found", "There is nothing at this path; see /docs for the API.")
        if error.status_code == 405:
            return error_response(405, "method_not_allowed", "This path does not take that method.")
        return error_response(error.status_code, "http_error", str(error.detail))

    @app.exception_handler(Exception)
    async def _crash(_: Request, error: Exception) -> JSONResponse:
        return crash_response(error)
