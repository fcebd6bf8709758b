"""``tracehook replay --from-trace`` without brokers: which messages of the replay list can be rebuilt
from their kept bodies, and why the others cannot (an embedded store written by the indexer)."""

from __future__ import annotations

import decimal
import types
import zlib

import pytest

from collector.cli.errors import ReplayError
from collector.cli.main import main as cli_main
from collector.cli.query import StoreSource
from collector.cli.replay import check_arguments, make_plan
from collector.cli.replay_amqp import AmqpDelivery, journal_name, safe_url
from collector.cli.replay_kafka import Wanted
from collector.cli.replay_trace import (
    ERASED,
    NO_DESTINATION,
    NO_HEADERS,
    NOT_KEPT,
    WITHHELD,
    kept_record,
    read_kept,
    trace_counts,
    truncated,
)
from collector.index.indexer import finish_batch, index_records
from collector.store import bodies, open_store
from collector.store.reader import MessageLookup
from tracehook import Status, wire
from tracehook.wire import BODY_TRUNCATED, BODY_ZLIB, BatchHeader, EventType

HEADER = BatchHeader("c", 1, "shop", "host")
T = 1_700_000_000_000
TOPIC, GROUP = "sms", "sender"
KAFKA_HEADERS = [["tracehook-msg-id", b"k-whole"], ["secret", b"\xff\x00"]]
AMQP_TABLE = {"tracehook-msg-id": "a-whole", "n": 7, "price": decimal.Decimal("1.50")}
AMQP_PROPS = {"amqp.exchange": "notify", "amqp.routing_key": "sms.send"}
LONG = b"x" * 200


def _pub(msg_id: str, i: int, **fields: object) -> tuple[BatchHeader, wire.Event]:
    return HEADER, wire.Event(*wire.make_event(EventType.PUB, T + i, "shop", TOPIC, msg_id, store_ms=T + i,
                                               queue=i % 2, offset=i, **fields))


def _failed(msg_id: str, i: int) -> list[tuple[BatchHeader, wire.Event]]:
    common = dict(queue=i % 2, offset=i, request_id=f"r{i}")
    return [(HEADER, wire.Event(*wire.make_event(EventType.SUB_BEFORE, T + i + 5, GROUP, TOPIC, msg_id, **common))),
            (HEADER, wire.Event(*wire.make_event(EventType.SUB_AFTER, T + i + 6, GROUP, TOPIC, msg_id,
                                                 status=Status.FAILED, error="gateway down", **common)))]


# msg id -> (the PUB's fields, what the reference expects: the record's (key, value, headers) or the reason)
CASES: dict[str, tuple[dict[str, object], object]] = {
    "k-whole": (dict(body=b"hello", raw_key=b"k1", raw_headers=KAFKA_HEADERS),
                (b"k1", b"hello", [(n, v) for n, v in KAFKA_HEADERS])),
    "k-zlib": (dict(body=zlib.compress(LONG), body_flags=BODY_ZLIB, raw_key=None, raw_headers=[]),
               (None, LONG, [])),
    "k-cut": (dict(body=b"hel", body_len=5, body_flags=BODY_TRUNCATED, raw_key=b"k", raw_headers=[]),
              truncated(3, 5)),
    "k-none": (dict(body_len=5), NOT_KEPT),
    "k-nohdr": (dict(body=b"hello", raw_key=b"k"), NO_HEADERS),
    "k-erased": (dict(body=b"private", raw_headers=[]), ERASED),
}


@pytest.fixture
def store_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    url = f"local:{tmp_path / 'index.sqlite3'}"
    store = open_store(url)
    records = []
    for i, (msg_id, (fields, _)) in enumerate(CASES.items()):
        records += [_pub(msg_id, i, **fields), *_failed(msg_id, i)]
    index_records(store, records)
    finish_batch(store)
    bodies.erase_messages(store, ["k-erased"])
    store.close()
    return url


def _wanted(msg_id: str, i: int = 0) -> Wanted:
    return Wanted(msg_id, i % 2, i, 1, T + i)


def test_each_message_is_rebuilt_exactly_or_refused_with_its_reason(store_url: str) -> None:
    source = StoreSource(store_url)
    try:
        items = list(source.replay(TOPIC, {"group": GROUP, "begin": T - 1000, "end": T + 1000}))
        plan = make_plan(items, {}, placed=False)
        assert sorted(w.msg_id for w in plan.todo) == sorted(CASES)
        found = {w.msg_id: (w, record, problem) for w, record, problem in read_kept(source, TOPIC, plan.todo)}
        unplaced = {**items[0], "queue": -1, "offset": -1}  # a RabbitMQ message: no place, a body all the same
        assert [w.msg_id for w in make_plan([unplaced], {}, placed=False).todo] == [items[0]["msg_id"]]
        assert make_plan([unplaced], {}).unplaceable
    finally:
        source.close()
    for msg_id, (_, expected) in CASES.items():
        w, record, problem = found[msg_id]
        if isinstance(expected, str):
            assert (record, problem) == (None, expected), msg_id
        else:
            assert problem == "" and record is not None, msg_id
            assert (record.key, record.value, record.headers) == expected, msg_id
            assert (record.topic, record.partition, record.offset, record.timestamp) == (
                TOPIC, w.partition, w.offset, w.time_ms)
    problems = [(w, p) for w, _, p in found.values() if p]
    assert trace_counts(2, problems) == ("not replayable from the trace: 4 (erased 1, no body kept 1, "
                                         "no headers kept 1, truncated 1); already replayed: 2")


def test_amqp_headers_come_back_as_table_values_and_need_a_destination() -> None:
    doc = {"props": AMQP_PROPS, "body": b"hi".hex(), "body_len": 2, "body_truncated": False, "raw_key": None,
           "raw_headers": [[n, wire.amqp_header_bytes(v).hex()] for n, v in AMQP_TABLE.items()]}
    record, problem = kept_record(doc, "notify", _wanted("a-whole", 3), amqp=True)
    assert problem == "" and record is not None
    assert dict(record.headers) == AMQP_TABLE and (record.exchange, record.routing_key) == ("notify", "sms.send")
    delivery = object.__new__(AmqpDelivery)  # no connection: only the message it would publish
    delivery.source_topic, delivery._exchange, delivery._routing_key = "notify", "", "sms-queue"
    assert delivery.destination(record) == ("", "sms-queue")
    props = delivery.properties(_wanted("a-whole", 3), record)  # marked with the place and time it has
    assert props.message_id is None and props.delivery_mode == 2
    assert props.headers == {**AMQP_TABLE, "tracehook-replay-of": "notify/1/3", "tracehook-replay-retry": "1",
                             "tracehook-original-timestamp": str(T + 3)}

    class Source(StoreSource):  # the store source's type, documents from a dict
        def __init__(self) -> None:
            kept = bodies.BodyLookup(bodies.KeptBody("notify", T, 0, b"hi", 2, None, [["h", wire.amqp_header_bytes(1)]]))
            self.query = types.SimpleNamespace(
                get_message=lambda m: MessageLookup(types.SimpleNamespace(props={}), kept))  # type: ignore[arg-type]

    [(_, record, problem)] = read_kept(Source(), "notify", [_wanted("a-old")], amqp=True)
    assert (record, problem) == (None, NO_DESTINATION)  # sent before the adapter recorded where
    [(_, record, problem)] = read_kept(Source(), "notify", [_wanted("a-old")], amqp=True, exchange="",
                                       routing_key="q")
    assert problem == "" and record is not None and record.headers == [("h", 1)]


def test_a_token_without_the_body_scope_stops_the_run() -> None:
    with pytest.raises(ReplayError, match="body scope"):
        kept_record({"body": None, "body_withheld": True}, TOPIC, _wanted("m"), amqp=False)


def _args(**given: object) -> types.SimpleNamespace:
    base = dict(topic=TOPIC, group=GROUP, bootstrap=None, to_topic=None, handler=None, amqp=None, exchange=None,
                routing_key=None, from_trace=False, rate=None)
    return types.SimpleNamespace(**{**base, **given})


@pytest.mark.parametrize(("given", "message"), [
    (dict(amqp="amqp://h"), "--amqp needs --from-trace"),
    (dict(from_trace=True, handler="m:f", routing_key="q"), "pass --amqp URL"),
    (dict(from_trace=True, to_topic="sms.replay"), "--to-topic needs a Kafka broker"),
    (dict(handler="m:f"), "--from-trace --amqp URL"),
])
def test_arguments_that_cannot_work_are_refused(given: dict[str, object], message: str) -> None:
    with pytest.raises(ReplayError, match=message):
        check_arguments(_args(**given))
    check_arguments(_args(from_trace=True, handler="m:f"))  # no broker needed to call a handler
    check_arguments(_args(from_trace=True, amqp="amqp://h", exchange=""))


def test_dry_run_lists_what_cannot_be_replayed_and_exits_4(store_url: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = cli_main(["replay", TOPIC, "--group", GROUP, f"--begin={T - 1000}", f"--end={T + 1000}", "--from-trace",
                     "--handler", "no.such:handler", "--store", store_url, "--journal", str(tmp_path / "j.jsonl")])
    out = capsys.readouterr().out
    assert code == 4, out
    assert "6 message(s) in the replay list, 2 to replay" in out
    for msg_id, (_, expected) in CASES.items():
        if isinstance(expected, str):
            assert f"  {msg_id} (partition {list(CASES).index(msg_id) % 2} offset {list(CASES).index(msg_id)}): " \
                   f"{expected}" in out
    assert "--from-trace --handler no.such:handler" in out and out.rstrip().endswith("--apply")


def test_the_journal_names_no_credentials() -> None:
    url = "amqp://guest:s3cret@rabbit:5673/prod"
    assert journal_name(url) == "amqp:rabbit:5673/prod" and "s3cret" not in safe_url(url)


async def test_through_a_collector_the_token_needs_the_body_scope(aiohttp_client, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from collector.server.app import create_app
    from collector.server.config import CollectorConfig

    tokens = [{"name": "ui", "scopes": ["query"], "token": "reader-query-0123456789"},
              {"name": "ops", "scopes": ["query", "body"], "token": "reader-body-0123456789"}]
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", tokens=tokens, body_topics=(TOPIC,))
    client = await aiohttp_client(create_app(config))
    store = open_store(config.store_url)
    index_records(store, [r for i, m in enumerate(("k-whole", "k-cut")) for r in
                          (_pub(m, i, **CASES[m][0]), *_failed(m, i))])
    finish_batch(store)
    store.close()

    def run(token: str) -> int:
        return cli_main(["replay", TOPIC, "--group", GROUP, f"--begin={T - 1000}", f"--end={T + 1000}",
                         "--from-trace", "--handler", "x:y", "--collector", str(client.make_url("")).rstrip("/"),
                         "--token", token, "--journal", str(tmp_path / "j.jsonl")])

    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(None, run, "reader-body-0123456789") == 4
    out = capsys.readouterr().out
    assert "2 message(s) in the replay list, 1 to replay" in out and f"k-cut (partition 1 offset 1): {truncated(3, 5)}" in out
    assert await loop.run_in_executor(None, run, "reader-query-0123456789") == 2
    out, err = capsys.readouterr()
    assert err == f"error: {WITHHELD}\n" and "to replay" not in out


def test_an_unreachable_rabbitmq_is_one_line_without_the_password(store_url: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    code = cli_main(["replay", TOPIC, "--group", GROUP, "--from-trace", "--amqp", "amqp://u:s3cret@127.0.0.1:1/%2F",
                     "--store", store_url, "--journal", str(tmp_path / "j.jsonl")])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("error: cannot reach RabbitMQ at amqp://u:***@127.0.0.1:1/%2F") and "s3cret" not in err
