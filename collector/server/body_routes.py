"""``POST /v1/admin/bodies/erase``: erase kept message bodies (admin scope only); the traces stay.

The JSON body names either message ids or a topic with an optional window of message times::

    {"msg_ids": ["id-1", "id-2"]}
    {"topic": "sms", "since": "2026-11-01", "until": "-1d"}

The answer is ``{"erased": N}``; a bad request is a 400 JSON answer, a missing or non-admin
token 401/403.  Each erasure is logged with the token's name (never a body, never the value).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from aiohttp import web

from collector.query.params import ParamError
from collector.query.timeparse import parse_time
from collector.server.appkeys import CONFIG_KEY, STORE_KEY
from collector.server.auth import bearer_token, check_token
from collector.server.errors import ANSWERED
from collector.server.responses import error_response, json_error
from collector.server.tokens import ADMIN
from collector.store.bodies import erase_messages, erase_topic

log = logging.getLogger(__name__)
MAX_MSG_IDS = 10_000
"""Message ids one request may name."""


def _request(doc: Any) -> tuple[list[str] | None, str | None, int | None, int | None]:
    if not isinstance(doc, dict) or ("msg_ids" in doc) == ("topic" in doc):
        raise ParamError("bad_value", 'give "msg_ids" (a list of message ids) or "topic" (with "since"/"until")')
    if "msg_ids" in doc:
        ids = doc["msg_ids"]
        if not isinstance(ids, list) or not ids or len(ids) > MAX_MSG_IDS or not all(
                isinstance(m, str) and m for m in ids):
            raise ParamError("bad_value", f"msg_ids must be a list of 1 to {MAX_MSG_IDS} non-empty strings")
        if "since" in doc or "until" in doc:
            raise ParamError("bad_value", "since/until go with topic, not msg_ids")
        return ids, None, None, None
    topic = doc["topic"]
    if not isinstance(topic, str) or not topic:
        raise ParamError("bad_value", "topic must be a non-empty string")
    since = None if doc.get("since") is None else parse_time(doc["since"], name="since")
    until = None if doc.get("until") is None else parse_time(doc["until"], name="until")
    return None, topic, since, until


async def erase_bodies(request: web.Request) -> web.Response:
    """POST /v1/admin/bodies/erase."""
    token = check_token(bearer_token(request), request.app[CONFIG_KEY].access, (ADMIN,), "erasing bodies")
    if STORE_KEY not in request.app:
        return json_error("no_store", "this collector has no index store", status=503)
    try:
        try:
            doc = json.loads(await request.read())
        except ValueError:
            raise ParamError("bad_json", "the body must be a JSON object") from None
        ids, topic, since, until = _request(doc)
        store = request.app[STORE_KEY]
        if ids is not None:
            erased = await asyncio.to_thread(erase_messages, store, ids)
        else:
            assert topic is not None
            erased = await asyncio.to_thread(erase_topic, store, topic, since, until)
    except ANSWERED as exc:
        return error_response(request, exc)
    log.info("bodies erased: token %r erased %d (%s)", None if token is None else token.name, erased,
             f"{len(ids)} msg ids" if ids is not None else "by topic")
    return web.json_response({"erased": erased})


def setup(app: web.Application) -> None:
    app.router.add_post("/v1/admin/bodies/erase", erase_bodies)
