"""JSON answers of the collector's API: errors always have the shape ``{"error": reason, "detail": text}``."""

from __future__ import annotations

from aiohttp import web

from collector.server.appkeys import CONFIG_KEY
from collector.server.errors import HttpAnswer, http_answer


def json_error(reason: str, detail: str, status: int = 400) -> web.Response:
    """The JSON error body every API error uses."""
    return web.json_response({"error": reason, "detail": detail}, status=status)


def error_response(request: web.Request, exc: BaseException) -> web.Response:
    """The JSON answer for a named error of any layer, with ``Retry-After`` when retrying later helps."""
    answer = http_answer(exc) or HttpAnswer(500, "internal", "internal error")
    headers = {}
    if answer.retry_later:
        headers["Retry-After"] = str(getattr(exc, "retry_after_s", request.app[CONFIG_KEY].retry_after_s))
    return web.json_response({"error": answer.reason, "detail": answer.detail}, status=answer.status, headers=headers)
