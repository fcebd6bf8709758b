"""Model-based test of indexed properties on both stores: random messages with hostile props are
indexed with random per-topic lists, a name is added, more messages are indexed, then a backfill
runs; after each step every property query, paged with random sizes and windows, through the
store's queries and through ``tracehook query prop --store``, lists exactly what the reference
(tests/fixtures/props_model.py) computes from the messages."""

from __future__ import annotations

import json
import uuid
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_helpers import backend_of, page_ids

from collector.cli import query as query_cli
from collector.cli.main import OneLineParser
from collector.index.backfill import backfill
from collector.index.indexer import finish_batch, index_records
from collector.store import Store, props
from collector.store.reader import TraceQuery
from tests.fixtures.props_model import OTHER_NAMES, SETTABLE_NAMES, VALUES, Indexed, Msg, events, expected, queries

EXAMPLES = {"local": 15, "hbase": 4}
_QUERY_PARSER = OneLineParser(prog="tracehook query")
query_cli.add_arguments(_QUERY_PARSER)  # `tracehook query`'s own arguments (main() would import every command)

prop_maps = st.dictionaries(st.sampled_from(SETTABLE_NAMES + OTHER_NAMES), st.sampled_from(VALUES), max_size=4)
message = st.tuples(st.integers(0, 1), st.integers(1, 40), st.booleans(), prop_maps,
                    st.none() | prop_maps)
name_sets = st.frozensets(st.sampled_from(SETTABLE_NAMES), min_size=1, max_size=3)


def _messages(nonce: str, drawn: list, batch: int) -> list[Msg]:
    return [Msg(f"{nonce}-{batch}-{i:02d}", f"{nonce}/t{topic}", t, traced, send, consume, batch)
            for i, (topic, t, traced, send, consume) in enumerate(drawn)]


def _bound(msgs: list[Msg]) -> st.SearchStrategy[int]:
    """A window's end: any time, or a message's own (where an off-by-one shows)."""
    times = sorted({m.t for m in msgs})
    return st.integers(0, 45) | st.sampled_from(times) if times else st.integers(0, 45)


def _check(store: Store, msgs: list[Msg], indexed: Indexed, topics: list[str], data: st.DataObject) -> None:
    q = TraceQuery(store)
    # One window and page size per step (drawing per query made hypothesis the test's main cost).
    begin, end = sorted(data.draw(st.tuples(_bound(msgs), _bound(msgs)), label="window"))
    limit = data.draw(st.integers(1, 4), label="limit")
    for topic, name, value in queries(msgs, topics):
        want = expected(msgs, indexed, topic, name, value, begin, end)
        got = page_ids(partial(q.by_prop, topic, name, value, begin, end), limit)
        assert got == want, (topic, name, value, begin, end)


def _cli_ids(store_url: str, capsys, topic: str, name: str, value: str, limit: int) -> list[str]:
    """Every page of ``tracehook query prop`` (``--store``), following the printed cursor."""
    ids: list[str] = []
    cursor: list[str] = []
    for _ in range(50):
        args = _QUERY_PARSER.parse_args(["--store", store_url, "--json", "prop", topic, "--begin", "0", "--end", "100", "--limit", str(limit),
                                         *cursor, "--", name, value])
        code = query_cli.run(args)
        page = json.loads(capsys.readouterr().out)
        assert code == (0 if page["items"] else 1)
        ids += [i["msg_id"] for i in page["items"]]
        if not page["next_cursor"]:
            return ids
        cursor = ["--cursor", page["next_cursor"]]
    raise AssertionError("no end of pages")


def test_props_model(store: Store, store_url: str, capsys) -> None:
    @settings(max_examples=EXAMPLES[backend_of(store_url)], deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(st.lists(message, max_size=14), st.lists(message, max_size=8), name_sets, name_sets, name_sets,
           st.integers(0, 1), st.data())
    def run(first: list, second: list, default: frozenset[str], own: frozenset[str], added: frozenset[str],
            added_to: int, data: st.DataObject) -> None:
        nonce = uuid.uuid4().hex[:6]  # one store for every example: fresh topics keep them apart
        topics = [f"{nonce}/t0", f"{nonce}/t1"]
        # Topic 0 takes the default list, topic 1 has its own.
        listed = props.load(store).with_names(None, sorted(default)).with_names(topics[1], sorted(own))
        props.save(store, listed)
        batch1 = _messages(nonce, first, 1)
        index_records(store, events(batch1))
        finish_batch(store)
        names1 = {topics[0]: default, topics[1]: own}
        indexed = Indexed({1: names1})
        _check(store, batch1, indexed, topics, data)

        # A name added later: new messages get it at once, older ones only from the backfill.
        topic = topics[added_to]
        grown = names1[topic] | added
        props.save(store, props.load(store).with_names(None if added_to == 0 else topic, sorted(grown)))
        batch2 = _messages(nonce, second, 2)
        index_records(store, events(batch2))
        finish_batch(store)
        names2 = {**names1, topic: grown}
        indexed = Indexed({1: names1, 2: names2})
        msgs = batch1 + batch2
        _check(store, msgs, indexed, topics, data)

        begin, end = sorted(data.draw(st.tuples(_bound(batch1), _bound(batch1)), label="backfill"))
        progress, _ = backfill(store, topic, sorted(added), begin, end, chunk=data.draw(st.integers(1, 50)))
        assert progress.done
        indexed = Indexed({1: names1, 2: names2}, [(topic, frozenset(added), begin, end)])
        _check(store, msgs, indexed, topics, data)

        # The CLI reads the same store and pages the same way.
        wanted = queries(msgs, [topic])
        t, name, value = data.draw(st.sampled_from(wanted))
        limit = data.draw(st.integers(1, 3))
        assert _cli_ids(store_url, capsys, t, name, value, limit) == expected(msgs, indexed, t, name, value, 0, 100)

    run()
