"""The dispatcher against a real local HTTP server: delivery, failover, retry, splitting, drop accounting."""

from __future__ import annotations

import threading

import tracehook
from tracehook import dispatcher, wire


def send_n(tracer: tracehook.Tracer, n: int, prefix: str = "m") -> list[str]:
    return [tracer.record_send("orders", f"{prefix}-{i}", keys=f"k{i}", queue=i % 4, offset=i) for i in range(n)]


def test_delivers_every_event_once_with_content_type_and_token(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url, token="s3cret", batch_events=100)
    ids = send_n(tracer, 1000)
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 1000 and stats["dropped_total"] == 0 and stats["queued"] == 0
    assert sorted(e.msg_id for e in stub.events()) == sorted(ids)
    assert len(stub.batches) >= 10  # batch_events bounds each batch
    assert all(len(b.events) <= 100 for b in stub.batches)
    assert set(stub.auth_headers) == {"Bearer s3cret"}
    assert set(stub.content_types) == {"application/msgpack"}
    header = stub.batches[0].header
    assert header.client_id == tracer.client_id and header.app == "test"
    assert len({b.header.seq for b in stub.batches}) == len(stub.batches)


def test_batches_are_bounded_by_bytes(stub, make_tracer):
    tracer = make_tracer(stub.url, batch_bytes=2000)
    for i in range(200):
        tracer.record_send("orders", f"m-{i}", keys="x" * 100)
    assert tracer.flush(10)
    assert len(stub.events()) == 200
    assert all(len(wire.encode_batch(b.header, b.events)) <= 2000 + 200 for b in stub.batches)  # + the header
    assert len(stub.batches) >= 200 * 100 // 2000


def test_fails_over_to_the_next_collector(stub, make_tracer, accounted, monkeypatch):
    monkeypatch.setattr(dispatcher, "first_collector", lambda client_id, collectors: 0)  # start at the dead one
    dead = "http://127.0.0.1:1"  # nothing listens on port 1
    tracer = make_tracer(dead, stub.url, failover_s=60)
    send_n(tracer, 50)
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 50 and stats["dropped_total"] == 0
    assert stats["retried"] >= 1
    requests_before = stub.requests
    send_n(tracer, 50, "n")  # the dead collector is set aside: no more retries
    assert tracer.flush(10)
    assert tracer.stats()["retried"] == stats["retried"]
    assert stub.requests > requests_before


def test_honours_retry_after_on_429_503_and_507(stub, make_tracer, accounted):
    stub.answers.extend([(503, {"Retry-After": "0"}), (429, {"Retry-After": "0.1"}), (507, {"Retry-After": "0"})])
    tracer = make_tracer(stub.url, max_retries=0)  # server-directed waits are not failures
    send_n(tracer, 10)
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 10 and stats["retried"] == 3 and stats["dropped_total"] == 0
    assert stats["refused"] == {"scripted": 3}  # counted under the collector's JSON reason
    assert len(stub.events()) == 10


def test_413_splits_the_batch_and_drops_only_an_oversized_event(stub, make_tracer, accounted):
    stub.max_body = 3000
    tracer = make_tracer(stub.url)
    tracer.flush(1)
    stub.hold()  # let the whole lot queue up so it goes as one batch that is too large
    tracer.record_send("orders", "first")
    assert stub.waiting.wait(5)
    ids = send_n(tracer, 100)
    tracer.record_send("orders", "huge", keys="x" * 5000)
    stub.release()
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["rejected"] == 1 and stats["sent"] == 101
    assert sorted(e.msg_id for e in stub.events()) == sorted(ids + ["first"])


def test_400_isolates_the_bad_event(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url)
    stub.hold()
    tracer.record_send("orders", "first")
    assert stub.waiting.wait(5)
    ids = send_n(tracer, 64)
    tracer.record_send("orders", "bad-one")
    stub.release()
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["rejected"] == 1 and stats["sent"] == 65
    assert "bad-one" not in {e.msg_id for e in stub.events()}
    assert len(stub.events()) == 65 and set(ids) <= {e.msg_id for e in stub.events()}


def test_wrong_token_is_rejected_not_retried(stub, make_tracer, accounted):
    stub.token = "right"
    tracer = make_tracer(stub.url, token="wrong")
    send_n(tracer, 5)
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["rejected"] == 5 and stats["retried"] == 0 and stub.requests == 1


def test_down_collector_drops_as_send_error_after_retries(make_tracer, accounted):
    tracer = make_tracer("http://127.0.0.1:1", max_retries=2, failover_s=0.01)
    send_n(tracer, 7)
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["send_error"] == 7 and stats["sent"] == 0 and stats["retried"] == 2


def test_restarted_collector_gets_every_event_exactly_once(stub, make_tracer, accounted):
    # A lone collector is retried at the backoff pace (<= 50 ms here), not once per failover_s.
    tracer = make_tracer(stub.url, max_retries=1000, failover_s=600)
    send_n(tracer, 100, "before")
    assert tracer.flush(10)
    stub.stop()
    send_n(tracer, 100, "during")
    assert not tracer.flush(0.3)  # nobody to deliver to
    accounted(tracer.stats())
    stub.start()
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 200 and stats["dropped_total"] == 0 and stats["retried"] >= 1
    received = [e.msg_id for e in stub.events()]
    assert len(received) == len(set(received)) == 200


def test_full_queue_drops_and_counts_exactly(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url, queue_size=10)
    stub.hold()
    tracer.record_send("orders", "first")
    assert stub.waiting.wait(5)  # the dispatcher is stuck in that request: nothing leaves the queue
    send_n(tracer, 100)
    stats = accounted(tracer.stats())
    assert stats["queued"] == 10 and stats["dropped"]["queue_full"] == 90 and stats["in_flight"] == 1
    stub.release()
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["emitted"] == 101 and stats["sent"] == 11 and stats["dropped"]["queue_full"] == 90


def test_close_drops_undeliverable_events_as_shutdown_within_its_deadline(make_tracer, accounted):
    tracer = make_tracer("http://127.0.0.1:1", max_retries=10_000, failover_s=0.05)
    send_n(tracer, 20)
    tracer.close(timeout=0.5)
    tracer.record_send("orders", "after-close")
    stats = accounted(tracer.stats())
    assert stats["sent"] == 0 and stats["queued"] == 0 and stats["in_flight"] == 0
    assert stats["dropped"]["shutdown"] == 21


def test_close_delivers_what_is_queued(stub, make_tracer):
    tracer = make_tracer(stub.url, linger_s=5.0)  # only close() makes it send now
    send_n(tracer, 30)
    tracer.close(timeout=5.0)
    assert len(stub.events()) == 30 and tracer.stats()["sent"] == 30


def test_unencodable_event_is_dropped_alone(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url)
    tracer.record_send("orders", "ok-1")
    tracer.record_send("orders", "odd", queue=object())  # type: ignore[arg-type]
    tracer.record_send("orders", "ok-2")
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["unencodable"] == 1 and stats["sent"] == 2


def test_batches_report_drop_counters_to_the_collector(stub, make_tracer):
    tracer = make_tracer(stub.url)
    tracer.record_send("", "no-topic")  # misuse: counted as invalid
    assert tracer.flush(5)
    tracer.record_send("orders", "m")
    assert tracer.flush(5)
    assert stub.batches[-1].header.client_stats["dropped_invalid"] == 1


def test_unconfigured_tracer_counts_disabled(make_tracer, accounted):
    tracer = make_tracer()
    send_n(tracer, 3)
    assert tracer.flush(1)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["disabled"] == 3 and stats["sent"] == 0


def test_hooks_from_many_threads_are_all_accounted(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url, queue_size=1_000_000)
    threads = [threading.Thread(target=send_n, args=(tracer, 2000, f"t{t}")) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tracer.flush(20)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 8000 and len(stub.events()) == 8000
    assert {e.type for e in stub.events()} == {wire.EventType.PUB}


def test_busy_collector_is_not_asked_again_before_retry_after(stub, make_tracer, monkeypatch):
    monkeypatch.setattr(dispatcher, "first_collector", lambda client_id, collectors: 0)  # start at the busy one
    other = type(stub)()
    other.start()
    try:
        stub.answers.append((429, {"Retry-After": "60"}))
        tracer = make_tracer(stub.url, other.url)
        send_n(tracer, 10)
        assert tracer.flush(10)
        send_n(tracer, 10, "n")
        assert tracer.flush(10)
        assert stub.requests == 1 and len(other.events()) == 20  # everything went to the other one
    finally:
        other.stop()


def test_clients_spread_over_the_collector_list(stub, make_tracer):
    others = [type(stub)(), type(stub)()]
    for other in others:
        other.start()
    try:
        tracers = [make_tracer(stub.url, *(o.url for o in others)) for _ in range(40)]
        for i, tracer in enumerate(tracers):
            tracer.record_send("orders", f"m-{i}")
        assert all(tracer.flush(10) for tracer in tracers)
        received = [len(server.events()) for server in (stub, *others)]
        # Each process starts at the collector its client id hashes to: not all of them at the
        # first (the chance that 40 clients skip one of three collectors is 3 * (2/3)**40, ~1e-7).
        assert sum(received) == 40 and min(received) > 0, received
    finally:
        for other in others:
            other.stop()
