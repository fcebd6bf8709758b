"""Bearer-token checks by scope (:mod:`collector.server.tokens`).

A route calls the matching helper first; it raises :class:`collector.server.errors.Unauthorized`
(401: no token or an unknown one) or :class:`collector.server.errors.Forbidden` (403: a known
token without the scope). A purpose no configured token holds a scope for is open::

    async def handler(request):
        require_query_token(request)
        ...

The query token a request presented is kept on the request, so that the answer can leave
message bodies out unless it has the ``body`` scope (:func:`may_read_bodies`).
"""

from __future__ import annotations

from aiohttp import web

from collector.server.appkeys import CONFIG_KEY
from collector.server.errors import Forbidden, Unauthorized
from collector.server.tokens import ADMIN, BODY, INGEST, QUERY, Token, TokenTable

QUERY_ACCESS_KEY: web.RequestKey[Token] = web.RequestKey("query_token", Token)
"""Request key of the :class:`Token` a query presented (unset while queries are open)."""


def bearer_token(request: web.Request) -> str | None:
    """The token from ``Authorization: Bearer <token>``, or None."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def check_token(presented: str | None, table: TokenTable, scopes: tuple[str, ...], purpose: str) -> Token | None:
    """The token ``presented`` when it holds one of ``scopes``; None when no token holds any (open).

    Raises Unauthorized for no token or an unknown one, Forbidden for a known one without the scope.
    """
    if not table.guarded(*scopes):
        return None
    if presented is None:
        raise Unauthorized(f"a bearer token is required for {purpose}")
    token = table.find(presented)
    if token is None:
        raise Unauthorized(f"unknown token for {purpose}")
    if not token.scopes.intersection(scopes):
        raise Forbidden(f"this token is not allowed for {purpose}")
    return token


def _table(request: web.Request) -> TokenTable:
    return request.app[CONFIG_KEY].access


def require_ingest_token(request: web.Request, presented: str | None = None) -> Token | None:
    """Check for the ingest scope (POST /v1/batches; /v1/traces passes the token it found)."""
    return check_token(presented or bearer_token(request), _table(request), (INGEST,), "ingest")


def require_query_token(request: web.Request) -> Token | None:
    """Check for the query scope (every query route and the web page's API calls)."""
    token = check_token(bearer_token(request), _table(request), (QUERY,), "queries")
    if token is not None:
        request[QUERY_ACCESS_KEY] = token
    return token


def require_admin_token(request: web.Request) -> Token | None:
    """Check for the admin scope; ingest is taken too (POST /v1/admin/roll, which the ingest token
    has always been allowed, and which only seals what a sender could fill anyway)."""
    return check_token(bearer_token(request), _table(request), (ADMIN, INGEST), "admin")


def may_read_bodies(request: web.Request) -> bool:
    """Whether answers to this (query-checked) request may carry message bodies: queries are open,
    or its token has the body scope."""
    if not _table(request).guarded(QUERY):
        return True
    token = request.get(QUERY_ACCESS_KEY)
    return token is not None and BODY in token.scopes


def reader_name(request: web.Request) -> str | None:
    """The name of the query token this request presented, or None (queries are open)."""
    token = request.get(QUERY_ACCESS_KEY)
    return None if token is None else token.name
