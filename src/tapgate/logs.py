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


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("uvicorn.access",):
        logging.getLogger(noisy).disabled = True
    # httpx logs each request's full URL at INFO: a push service's URL carries the device's push address.
    # The MCP SDK logs every session at INFO and message details (which can quote arguments) at DEBUG.
    for chatty in ("httpx", "httpcore", "aiosqlite", "sqlalchemy.engine", "hpack", "mcp"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
