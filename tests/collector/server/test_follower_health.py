"""``tracehook collector --index``: a follower that keeps failing shows on ``/healthz`` and ``/metrics``
(a collector answering "ok" while its index never runs was issue 41's second finding).

The follower's command is replaced by a process that exits at once with the code under test: what
is checked is the collector's supervision, not Spark (tests/spark_jobs/test_follow.py runs the real one).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from collector.server import follower
from collector.server.app import create_app


async def _health_when(client: Any, done: Any) -> dict[str, Any]:
    for _ in range(200):
        body = await (await client.get("/healthz")).json()
        if done(body):
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"/healthz never got there: {body}")


@pytest.mark.parametrize(("code", "state"), [(1, "restarting"), (3, "stopped")])
async def test_a_failing_follower_is_not_ok(aiohttp_client: Any, collector_config: Any, monkeypatch: Any,
                                            code: int, state: str) -> None:
    """Exit 1 (retryable) is restarted and counted, exit 3 (bad input) stops it; both say
    ``index_failing`` with the exit code on /healthz and 0 on ``tracehook_collector_index_follower_up``."""
    monkeypatch.setattr(follower, "follower_command", lambda _config: [sys.executable, "-c", f"raise SystemExit({code})"])
    monkeypatch.setattr(follower, "RESTART_DELAY_S", 0.05)
    app = create_app(collector_config)
    app.cleanup_ctx.append(follower.index_follower(collector_config))
    client = await aiohttp_client(app)

    body = await _health_when(client, lambda b: b["index_follower"]["state"] == state)

    assert body["status"] == "index_failing" and body["index_follower"]["last_exit"] == code
    if state == "restarting":
        body = await _health_when(client, lambda b: b["index_follower"]["restarts"] >= 2)
        # Restarts every 0.05 s leave it "running" most of the time: wait longer from the next exit on,
        # and read the gauge while it waits.
        monkeypatch.setattr(follower, "RESTART_DELAY_S", 30.0)
        restarts = body["index_follower"]["restarts"]
        await _health_when(client, lambda b: b["index_follower"]["restarts"] > restarts)
        assert (await _health_when(client, lambda b: True))["index_follower"]["state"] == "restarting"
    metrics = await (await client.get("/metrics")).text()
    assert "tracehook_collector_index_follower_up 0.0" in metrics


async def test_a_running_follower_is_ok(aiohttp_client: Any, collector_config: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(follower, "follower_command", lambda _config: [sys.executable, "-c", "import time; time.sleep(60)"])
    app = create_app(collector_config)
    app.cleanup_ctx.append(follower.index_follower(collector_config))
    client = await aiohttp_client(app)

    body = await _health_when(client, lambda b: b["index_follower"]["state"] == "running")

    assert body["status"] == "ok" and body["index_follower"] == {"state": "running", "restarts": 0, "last_exit": None}
    assert "tracehook_collector_index_follower_up 1.0" in await (await client.get("/metrics")).text()
