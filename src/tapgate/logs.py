"""Structured logs: one JSON object per line on standard error.

Log calls pass ids, counts and outcomes in ``extra``; a message body, argument text or token never goes
into a log line (gate G11).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# uvicorn adds color_message, the same text with terminal colours: never wanted in JSON.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName", "color_message"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            line["exc"] = record.exc_info[0].__name__
        return json.dumps(line, default=str)


# Third-party loggers that print request headers (a bearer token), WebSocket frames (a device's words) or
# SQL parameters (message bodies) at DEBUG or TRACE: capped at every level, so G11 holds at
# log_level = "debug" too. uvicorn keeps its INFO lines (start, stop, a link opened or closed).
CAPPED: dict[str, int] = {
    "uvicorn": logging.INFO,
    "uvicorn.error": logging.INFO,
    "uvicorn.asgi": logging.WARNING,
    "websockets": logging.WARNING,
    "wsproto": logging.WARNING,
    "h11": logging.WARNING,
    "httptools": logging.WARNING,
    # httpx logs each request's full URL at INFO: a push service's URL carries the device's push address.
    "httpx": logging.WARNING,
    "httpcore": logging.WARNING,
    "hpack": logging.WARNING,
    # The MCP SDK logs every session at INFO and message details (which can quote arguments) at DEBUG.
    "mcp": logging.WARNING,
    "sse_starlette": logging.WARNING,
    "aiosqlite": logging.WARNING,
    "asyncpg": logging.WARNING,
    "sqlalchemy": logging.WARNING,
    "alembic": logging.INFO,
    "nats": logging.WARNING,
    "multipart": logging.WARNING,
    "python_multipart": logging.WARNING,
}


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).disabled = True
    cap_third_party_loggers()


def cap_third_party_loggers() -> None:
    """Hold every logger in ``CAPPED`` at or above its level, whatever the root's level."""
    for name, floor in CAPPED.items():
        logger = logging.getLogger(name)
        if logger.level < floor:  # NOTSET (0) inherits the root's level: capped as well
            logger.setLevel(floor)
