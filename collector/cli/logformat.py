"""Log lines as text or as JSON (``--log-format json``), for journald and log shippers.

One JSON object per line: ``time`` (ISO-8601 UTC, milliseconds), ``level`` (lower case),
``logger``, ``message``, and ``exception`` (the formatted traceback) when a record has one,
so a multi-line traceback stays one line::

    configure_logging("INFO", "json")
    logging.getLogger("collector").info("listening on %s", url)
    # {"time": "2026-11-26T03:20:55.123Z", "level": "info", "logger": "collector", "message": "listening on ..."}
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import TextIO

LOG_FORMATS = ("text", "json")
DEFAULT_LOG_FORMAT = "text"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line."""

    def format(self, record: logging.LogRecord) -> str:
        return json_line(record.getMessage(), level=record.levelname, logger=record.name, created=record.created,
                         exception=self.formatException(record.exc_info) if record.exc_info else None)


def json_line(message: str, *, level: str = "INFO", logger: str = "tracehook", created: float | None = None,
              exception: str | None = None) -> str:
    """One log line as JSON (what :class:`JsonFormatter` writes)."""
    created = time.time() if created is None else created
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"
    doc = {"time": stamp, "level": level.lower(), "logger": logger, "message": message}
    if exception:
        doc["exception"] = exception
    return json.dumps(doc, ensure_ascii=False)


def add_log_format_argument(parser: argparse.ArgumentParser) -> None:
    """``--log-format text|json``."""
    parser.add_argument("--log-format", choices=LOG_FORMATS, default=DEFAULT_LOG_FORMAT,
                        help="log lines as text (default) or one JSON object per line (for journald and log shippers)")


def configure_logging(level: str | int, log_format: str = DEFAULT_LOG_FORMAT, stream: TextIO | None = None) -> None:
    """Configure the root logger: ``log_format`` text or json, on ``stream`` (default stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper() if isinstance(level, str) else level, handlers=[handler])
