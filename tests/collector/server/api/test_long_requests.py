"""Long ids and parameters reach the API (a JSON answer), not aiohttp's plain-text line limit."""

from __future__ import annotations

from urllib.parse import quote

from collector.query.params import MAX_PARAM_LEN


async def test_a_10_kb_message_id_is_looked_up(client):
    msg_id = "é" * 10_000                      # 20 KB of UTF-8, 60 KB percent-encoded
    resp = await client.get("/v1/messages/" + quote(msg_id, safe=""))
    assert resp.status == 404
    assert resp.content_type == "application/json"


async def test_a_too_long_parameter_is_a_json_400(client):
    resp = await client.get("/v1/topics/orders/messages", params={"key": "k" * (MAX_PARAM_LEN + 1)})
    assert resp.status == 400
    body = await resp.json()
    assert str(MAX_PARAM_LEN) in str(body)
