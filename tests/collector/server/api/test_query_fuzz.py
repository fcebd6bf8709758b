"""Bad input against a real collector process: schemathesis over /openapi.json, garbage QMQ queries.

The collector runs as ``tracehook collector`` on 127.0.0.1 over a local store holding
the sample scenario plus messages whose topic, key and id carry separators, NUL bytes
and odd Unicode, so generated lookups can hit data.  Whatever comes in: no 5xx, no
traceback in a response, errors as ``{"error": reason, "detail": text}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote

import pytest
import requests
from api_helpers import fill_store
from fixtures.collector_process import CollectorProcess
from fixtures.deps import require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.index.indexer import finish_batch, index_records
from collector.server.routes import OPENAPI_PATH
from collector.store import open_store
from tests.fixtures.sample import TOPIC, send

schemathesis = require("schemathesis")

HOSTILE = [  # (topic, key, msg_id): prefixes of each other, separators, NUL, astral and combining characters
    ("a", "b\x00c", "m"),
    ("a\x00b", "c", "m\x00"),
    ("a/b", "k/1", "m/1"),
    ("\U0001d11e|:", "e\u0301", "\u00e9/\x00"),
]
QMQ_ROUTES = [("/api/message", "backupQuery"), ("/api/message/dead", "backupQuery"),
              ("/api/message/detail", "backupQuery"), ("/api/message/records", "recordQuery")]
TIMEOUT_S = 30


@dataclass(frozen=True)
class LiveCollector:
    """A collector subprocess on 127.0.0.1."""

    url: str

    def get(self, path: str, **params: str) -> requests.Response:
        return requests.get(self.url + path, params=params, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def live_collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCollector]:
    data_dir = str(tmp_path_factory.mktemp("fuzz"))
    now_ms = int(time.time() * 1000)
    store_url = f"local:{data_dir}/index.sqlite3"
    fill_store(store_url, now_ms)
    store = open_store(store_url)
    t = now_ms - 60_000
    index_records(store, [send(msg_id, t + n, dict(topic=topic, keys=key, broker="b", queue=0, offset=n,
                                                   born_ms=t, store_ms=t + n))
                          for n, (topic, key, msg_id) in enumerate(HOSTILE)])
    finish_batch(store)  # rollups, so /v1/overview answers with hostile topic names too
    store.close()
    collector = CollectorProcess(data_dir, "--durability", "os", store=None)
    try:
        yield LiveCollector(collector.url)
    finally:
        collector.stop()


def assert_clean(response: requests.Response) -> None:
    """Not a server error, no traceback, a JSON body; errors in the documented error shape."""
    assert response.status_code < 500, response.text
    assert "Traceback" not in response.text and 'File "' not in response.text
    body = response.json()
    if response.status_code >= 400:
        assert isinstance(body["error"], str) and body["error"] and isinstance(body["detail"], str), body


# --- hostile ids, topics and keys through the HTTP API ---------------------------------

def segment(text: str) -> str:
    """``text`` as one URL path segment: '/' and NUL percent-encoded too."""
    return quote(text, safe="")


@pytest.mark.parametrize("topic, key, msg_id", HOSTILE)
def test_hostile_names_are_found_exactly_over_http(live_collector: LiveCollector, topic: str, key: str,
                                                    msg_id: str) -> None:
    response = live_collector.get(f"/v1/messages/{segment(msg_id)}")
    assert response.status_code == 200, response.text
    assert (response.json()["msg_id"], response.json()["topic"], response.json()["keys"]) == (msg_id, topic, key)
    records = live_collector.get(f"/v1/messages/{segment(msg_id)}/records")
    assert records.status_code == 200 and records.json() == {"msg_id": msg_id, "records": []}  # never consumed

    by_key = live_collector.get(f"/v1/topics/{segment(topic)}/messages", key=key)
    assert [i["msg_id"] for i in by_key.json()["items"]] == [msg_id]
    by_time = live_collector.get(f"/v1/topics/{segment(topic)}/messages", begin="1h")
    assert [i["msg_id"] for i in by_time.json()["items"]] == [m for t, _, m in HOSTILE if t == topic]
    qmq = live_collector.get("/api/message", backupQuery=json.dumps({"subject": topic, "isDelay": False, "len": 10}))
    assert [i["messageId"] for i in qmq.json()["list"]] == [m for t, _, m in HOSTILE if t == topic]
    by_id = live_collector.get("/api/message", backupQuery=json.dumps({"subject": topic, "messageId": msg_id,
                                                                           "isDelay": False, "len": 1}))
    assert [i["messageId"] for i in by_id.json()["list"]] == [msg_id]


@pytest.mark.parametrize("msg_id", ["m\x00\x00", "m\x00\xff", "m/", "m%00", "\u00e9", "e\u0301/\x00"])
def test_near_misses_of_hostile_ids_are_404(live_collector: LiveCollector, msg_id: str) -> None:
    response = live_collector.get(f"/v1/messages/{segment(msg_id)}")
    assert response.status_code == 404 and response.json()["error"] == "not_found"


# --- schemathesis against the served OpenAPI document ---------------------------------

# schemathesis.pytest.from_fixture (the lazy loader) breaks on pytest 9 (it sets Node._nodeid, which
# pytest 9 no longer has); the collector serves this very file, which the first test checks.
schema = schemathesis.openapi.from_path(OPENAPI_PATH)


def test_the_fuzzed_document_is_the_served_one(live_collector: LiveCollector) -> None:
    served = live_collector.get("/openapi.json")
    assert served.status_code == 200 and served.json() == json.loads(OPENAPI_PATH.read_text())


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi_document(case, live_collector: LiveCollector) -> None:
    # Every check but "schema-valid requests are accepted": times are free-form strings and a window
    # may be too long or reversed, which a JSON schema cannot say, so such requests are rightly 400.
    response = case.call_and_validate(base_url=live_collector.url, timeout=TIMEOUT_S,
                                      excluded_checks=[schemathesis.checks.positive_data_acceptance])
    assert "Traceback" not in response.text


# --- garbage backupQuery / recordQuery ------------------------------------------------

MAX_DEPTH = 1200  # past json's recursion limit, within aiohttp's 8190-byte request line once URL-encoded

# Text without lone surrogates (requests cannot send those raw; JSON escapes them, see json_values).
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)
huge_ints = st.one_of(st.integers(), st.integers(2**63 - 5, 2**63 + 5), st.integers(-(2**70), 2**70),
                      st.sampled_from([10**300, -(10**300), 2**64]))
odd_strings = st.one_of(
    st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=20),  # "\ud800" in JSON
    st.sampled_from(["", "0", "1e3", "\u00b2", "\u0661\u0662\u0663", "-1", "9" * 25, "NaN", "\x00", "1h",
                     "99999999999999999999d", "9999-12-31 23:59:59", "0001-01-01T00:00:00+14:00", "tn.", "tn.AAAA",
                     "k.////", "\U0001d11e", "e\u0301", "\ud800"]),
)
scalars = st.one_of(st.none(), st.booleans(), huge_ints, st.floats(), odd_strings)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(texts, inner, max_size=4)), max_leaves=12)
# Each garbage query is a valid one with a few fields replaced, so the fields after them get parsed too.
known_subjects = st.sampled_from([TOPIC] + [topic for topic, _, _ in HOSTILE])
known_ids = st.sampled_from(["msg-normal", "msg-dead"] + [msg_id for _, _, msg_id in HOSTILE])
edge_times = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e300, -1.5, 2**63, 2**63 - 1, 10**30, "\u00b2",
                              "\u0663", "99999999999999999999d", "9999-12-31 23:59:59", "0001-01-01", "1h"])
times = st.one_of(edge_times, huge_ints, st.floats(), odd_strings)
FIELD_VALUES = {
    "subject": st.one_of(known_subjects, odd_strings, json_values),
    "messageId": st.one_of(known_ids, odd_strings, json_values),
    "msgCreateTimeBegin": st.one_of(times, json_values),
    "msgCreateTimeEnd": st.one_of(times, json_values),
    "isDelay": json_values,
    "len": st.one_of(huge_ints, odd_strings, json_values),
    "start": st.one_of(odd_strings, json_values),
    "brokerGroup": st.one_of(st.just("broker-a"), odd_strings, json_values),
    "sequence": st.one_of(huge_ints, odd_strings, json_values),
    "recordCode": st.one_of(st.integers(-1, 3), huge_ints, odd_strings, json_values),
}
VALID = {
    "/api/message": {"subject": TOPIC, "isDelay": False, "len": 5},
    "/api/message/dead": {"subject": TOPIC, "isDelay": False, "len": 5},
    "/api/message/detail": {"subject": TOPIC, "brokerGroup": "broker-a", "sequence": 10},
    "/api/message/records": {"subject": TOPIC, "messageId": "msg-normal", "recordCode": 0},
}
changes = st.lists(st.sampled_from(sorted(FIELD_VALUES)), min_size=1, max_size=3, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({name: FIELD_VALUES[name] for name in names}))
not_json = texts.filter(lambda t: not _is_json(t))
deeply_nested = st.integers(1, MAX_DEPTH).map(lambda n: '{"subject": ' + "[" * n + "]" * n + "}")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("path, param", QMQ_ROUTES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(not_json, deeply_nested, json_values.filter(lambda v: not isinstance(v, dict)).map(json.dumps)))
def test_qmq_rejects_what_is_not_a_json_object(live_collector: LiveCollector, path: str, param: str, raw: str) -> None:
    response = live_collector.get(path, **{param: raw})
    assert_clean(response)
    assert response.status_code == 400
    assert response.json()["error"] in ("missing_param", "bad_json", "missing_field", "bad_type")


QMQ_REASONS = {"missing_field", "bad_type", "bad_value", "bad_time", "bad_window", "bad_limit", "bad_cursor",
               "ambiguous_sequence"}
"""What a well-formed JSON object with bad fields may be refused for (docs/query.md)."""


@pytest.mark.parametrize("path, param", QMQ_ROUTES)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=changes)
def test_qmq_garbage_fields_are_never_500(live_collector: LiveCollector, path: str, param: str,
                                          changes: dict) -> None:
    response = live_collector.get(path, **{param: json.dumps({**VALID[path], **changes})})
    assert_clean(response)
    assert response.status_code in (200, 400, 404), response.text
    if response.status_code == 400:
        assert response.json()["error"] in QMQ_REASONS, response.text


# Every route reads subject, and messageId when it is given: either one not a non-empty string is 400,
# whatever garbage the other fields hold.
not_text = st.one_of(odd_strings, json_values).filter(lambda v: not _is_text(v))
bad_names = st.one_of(
    st.fixed_dictionaries({"subject": not_text}),
    st.fixed_dictionaries({"messageId": not_text.filter(lambda v: v not in (None, ""))}),  # absent is fine
)


@pytest.mark.parametrize("path, param", QMQ_ROUTES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(changes=changes, bad=bad_names)
def test_qmq_a_bad_subject_or_message_id_is_400(live_collector: LiveCollector, path: str, param: str,
                                                changes: dict, bad: dict) -> None:
    response = live_collector.get(path, **{param: json.dumps({**VALID[path], **changes, **bad})})
    assert_clean(response)
    assert response.status_code == 400, response.text
    assert response.json()["error"] in QMQ_REASONS, response.text


def _is_text(value: object) -> bool:
    """A non-empty string that UTF-8 can encode (JSON may carry lone surrogates such as "\\ud800")."""
    return isinstance(value, str) and value != "" and not any("\ud800" <= c <= "\udfff" for c in value)
