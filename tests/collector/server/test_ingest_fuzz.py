"""Fuzzing ``POST /v1/batches``: 10,000 hostile bodies in all, and never a 5xx.

The bulk is hypothesis' search straight into ``check_body`` (what the handler runs on every
body): a failure shrinks to a small body and is kept in the example database.  Seeded bodies
go to ``check_body`` too, some thousand through the real app in process and hundreds over real
HTTP to a collector subprocess, with valid batches mixed in. Afterwards the log holds exactly the valid
batches that were acknowledged, and every record decodes.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import astuple
from typing import Any

import pytest
import requests
from collector_service_helpers import make_batch
from fixtures.tracelog import assert_log_is_clean
from hypothesis import HealthCheck, given, settings
from ingest_fuzz_cases import WIRE_REASONS, Case, cases, hostile_bodies, wire_verdict

from collector.server.app import create_app
from collector.server.ingest import check_body

pytestmark = pytest.mark.slow

MSGPACK = {"Content-Type": "application/msgpack"}
HYPOTHESIS_CASES = 5_000
DIRECT_CASES = 3_000
IN_PROCESS_CASES = 1_500
REAL_HTTP_CASES = 500
assert HYPOTHESIS_CASES + DIRECT_CASES + IN_PROCESS_CASES + REAL_HTTP_CASES == 10_000
VALID_EVERY = 10  # one valid batch after every this many hostile ones (not counted above)


def _check_verdict(case: Case) -> str | None:
    """check_body on one case must agree with the independent checker; returns the reason."""
    result = check_body(case.body)  # must not raise: a worker's answer is a value
    expected = wire_verdict(case.body)
    if not expected.reasons:
        assert not case.known_bad, f"{case.kind} accepted: {case.body[:64]!r}"
        assert result.header is not None and result.events == expected.events
        assert astuple(result.header) == expected.header
        return None
    assert result.header is None and result.reason in expected.reasons, (case.kind, result, expected)
    assert expected.reasons <= WIRE_REASONS
    return result.reason


@settings(max_examples=HYPOTHESIS_CASES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_bodies())
def test_check_body_rejects_hypothesis_bodies_like_the_reference_decoder(case: Case) -> None:
    _check_verdict(case)


def test_check_body_on_seeded_hostile_bodies() -> None:
    rejected = [_check_verdict(case) for case in cases(seed=1, count=DIRECT_CASES)]
    assert sum(r is not None for r in rejected) > DIRECT_CASES * 0.9  # the generator does make bad bodies


def _assert_refused(status: int, text: str, case: Case) -> None:
    assert status < 500, f"{case.kind}: {status} {text[:300]}"
    assert "Traceback" not in text
    if case.known_bad:
        assert status == 400, (case.kind, status, text[:300])
    if status == 400:  # refused for a reason the independent checker gives too
        assert json.loads(text)["error"] in wire_verdict(case.body).reasons, (case.kind, text[:300])


class _Ledger:
    """What the collector acknowledged: (client_id, seq) -> offset, from non-duplicate 200s."""

    def __init__(self) -> None:
        self.acked: dict[tuple[str, int], int] = {}
        self.valid_sent = 0

    def record(self, body: bytes, answer: dict[str, Any]) -> None:
        expected = wire_verdict(body)
        assert not expected.reasons and expected.header is not None
        if expected.events and not answer["duplicate"]:
            client_id, seq = expected.header[:2]
            assert (client_id, seq) not in self.acked
            self.acked[(client_id, seq)] = answer["offset"]

    def assert_log_matches(self, log_dir: str) -> None:
        records = assert_log_is_clean(log_dir)
        assert {(r.client_id, r.seq): r.offset for r in records} == self.acked
        assert len(self.acked) >= self.valid_sent  # every interleaved valid batch is in


def _with_valid(hostile: list[Case], client_id: str) -> list[tuple[Case, bool]]:
    mixed: list[tuple[Case, bool]] = []
    for i, case in enumerate(hostile):
        mixed.append((case, False))
        if i % VALID_EVERY == 0:
            mixed.append((Case(make_batch(client_id, i, n=2), False, "valid"), True))
    return mixed


async def test_real_app_in_process_answers_4xx_and_keeps_only_valid_batches(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    ledger = _Ledger()
    mixed = _with_valid(cases(seed=2, count=IN_PROCESS_CASES), "in-process")

    async def send(case: Case, valid: bool) -> None:
        resp = await client.post("/v1/batches", data=case.body, headers=MSGPACK)
        text = await resp.text()
        if resp.status == 200:
            assert not case.known_bad, case.kind
            ledger.record(case.body, await resp.json())
            ledger.valid_sent += valid
        else:
            assert not valid, (resp.status, text)
            _assert_refused(resp.status, text, case)
            assert (await resp.json())["error"] in WIRE_REASONS

    for start in range(0, len(mixed), 32):  # a few in flight at once, like real clients
        await asyncio.gather(*(send(case, valid) for case, valid in mixed[start:start + 32]))
    assert (await client.get("/healthz")).status == 200
    ledger.assert_log_matches(collector_config.log_dir)


def test_real_collector_over_http_survives_hostile_bodies(collector_process, tmp_path) -> None:
    collector = collector_process(str(tmp_path / "data"), "--segment-bytes", str(256 * 1024))
    ledger = _Ledger()
    url = collector.url + "/v1/batches"
    with requests.Session() as http:
        for case, valid in _with_valid(cases(seed=3, count=REAL_HTTP_CASES), "real-http"):
            resp = http.post(url, data=case.body, headers=MSGPACK, timeout=30)
            if resp.status_code == 200:
                assert not case.known_bad, case.kind
                ledger.record(case.body, resp.json())
                ledger.valid_sent += valid
            else:
                assert not valid, resp.text
                _assert_refused(resp.status_code, resp.text, case)
                assert resp.json()["error"] in WIRE_REASONS
        metrics = http.get(collector.url + "/metrics", timeout=5).text
    assert "tracehook_collector_rejected_total" in metrics
    assert collector.stop() == 0, collector.output()[-2000:]
    assert "Traceback" not in collector.output()
    ledger.assert_log_matches(os.path.join(collector.data_dir, "log"))
