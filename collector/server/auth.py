"""Bearer-token checks: one token for ingest, another for queries.

A route calls the matching helper first; it raises :class:`collector.server.errors.Unauthorized`
(401: no token or an unknown one) or :class:`collector.server.errors.Forbidden` (403: the other
purpose's token). A purpose whose token is not configured is open::

    async def handler(request):
        require_query_token(request)
        ...
"""

from __future__ import annotations

import hmac

from aiohttp import web

from collector.server.appkeys import CONFIG_KEY
from collector.server.config import CollectorConfig
from collector.server.errors import Forbidden, Unauthorized


def bearer_token(request: web.Request) -> str | None:
    """The token from ``Authorization: Bearer <token>``, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and hmac.compare_digest(a.encode(), b.encode())


def check_token(presented: str | None, required: str | None, other: str | None, purpose: str) -> None:
    """Raise unless ``presented`` is ``required`` (or nothing is required)."""
    if required is None or _same(presented, required):
        return
    if presented is None:
        raise Unauthorized(f"a bearer token is required for {purpose}")
    if _same(presented, other):
        raise Forbidden(f"this token is not allowed for {purpose}")
    raise Unauthorized(f"unknown token for {purpose}")


def _config(request: web.Request) -> CollectorConfig:

    return request.app[CONFIG_KEY]


def require_ingest_token(request: web.Request) -> None:
    """Check the ingest token (POST /v1/batches)."""
    cfg = _config(request)
    check_token(bearer_token(request), cfg.ingest_token, cfg.query_token, "ingest")


def require_query_token(request: web.Request) -> None:
    """Check the query token (every query route and the web page's API calls)."""
    cfg = _config(request)
    check_token(bearer_token(request), cfg.query_token, cfg.ingest_token, "queries")
