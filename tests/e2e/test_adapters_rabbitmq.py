"""RabbitMQ through the whole chain: pika adapter -> collector -> sealed trace log -> index -> trace.

N keyed messages to a fanout exchange with two queues: "retry" nacks some once with requeue
and takes them again, "dlq" rejects others into a dead-letter exchange whose "parking" queue
takes them.  Each message's indexed trace must show the send and exactly each queue's outcomes,
joined through the ``traceparent`` and message id the publisher wrote and the consumers read.
"""

from __future__ import annotations

from typing import Any

import pika
import pytest
from adapter_helpers import collect_and_index, trace_query
from fixtures.brokers import drain
from fixtures.ports import free_port

import tracehook
from tracehook.adapters import HEADER_KEYS
from tracehook.adapters import pika as traced_pika
from tracehook.context import trace_id_for

pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow]

N = 24
FAILING = {f"k{i}" for i in range(0, N, 4)}
DEAD = {f"k{i}" for i in range(1, N, 5)}


def test_trace_shows_send_and_both_queues(rabbitmq_url, tmp_path):
    exchange = f"e2e-{free_port()}"
    retry_q, dlq_q, parking = f"{exchange}.retry", f"{exchange}.dlq", f"{exchange}.parking"
    read: dict[tuple[str, str], str] = {}   # (msg id, queue) -> the traceparent the consumer read

    def run(tracer: tracehook.Tracer) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
        try:
            channel = traced_pika.TracedChannel(connection.channel(), tracer)
            channel.exchange_declare(exchange, "fanout", auto_delete=True)
            channel.exchange_declare(f"{exchange}.dlx", "fanout", auto_delete=True)
            channel.queue_declare(retry_q, auto_delete=True)
            channel.queue_declare(dlq_q, auto_delete=True, arguments={"x-dead-letter-exchange": f"{exchange}.dlx"})
            channel.queue_declare(parking, auto_delete=True)
            channel.queue_bind(retry_q, exchange)
            channel.queue_bind(dlq_q, exchange)
            channel.queue_bind(parking, f"{exchange}.dlx")
            for i in range(N):
                channel.basic_publish(exchange, "", b"m%d" % i, pika.BasicProperties(headers={HEADER_KEYS: f"k{i}"}))

            nacked: set[str] = set()

            def handler(queue: str, settle: Any) -> Any:
                def on_message(ch: Any, method: Any, props: Any, body: bytes) -> None:
                    ctx = tracehook.extract_headers(props.headers)
                    read[(ctx.msg_id or "", queue)] = ctx.traceparent or ""
                    settle(ch, method, props.headers[HEADER_KEYS])
                return on_message

            def retrying(ch: Any, method: Any, key: str) -> None:
                if key in FAILING and key not in nacked:
                    nacked.add(key)
                    ch.basic_nack(method.delivery_tag, requeue=True)
                else:
                    ch.basic_ack(method.delivery_tag)

            def dead_lettering(ch: Any, method: Any, key: str) -> None:
                if key in DEAD:
                    ch.basic_reject(method.delivery_tag, requeue=False)
                else:
                    ch.basic_ack(method.delivery_tag)

            drain(channel, retry_q, handler(retry_q, retrying), N + len(FAILING))
            drain(channel, dlq_q, handler(dlq_q, dead_lettering), N)
            drain(channel, parking, handler(parking, lambda ch, method, key: ch.basic_ack(method.delivery_tag)),
                  len(DEAD))
        finally:
            connection.close()

    with trace_query(collect_and_index(tmp_path, run)) as query:
        for i in range(N):
            key = f"k{i}"
            found = query.by_key(exchange, key, 0, 2**62, 10).items
            assert len(found) == 1, key
            msg_id = found[0].msg_id
            trace = query.get_trace(msg_id)
            assert trace is not None and trace.send is not None
            assert (trace.topic, trace.keys, trace.send["status_name"]) == (exchange, key, "OK")
            # where it was sent survives the collector, the log and the index (a fanout ignores the key)
            assert trace.props == {"amqp.exchange": exchange, "amqp.routing_key": ""}, key
            outcomes = {queue: [(a["status_name"], a["retry"]) for a in attempts]
                        for queue, attempts in trace.consumes.items()}
            expected = {
                retry_q: [("RETRY_LATER", 0), ("OK", 1)] if key in FAILING else [("OK", 0)],
                dlq_q: [("FAILED", 0)] if key in DEAD else [("OK", 0)],
            }
            if key in DEAD:
                # parking's first delivery: the broker's x-death names the queue that dead-lettered it, not parking
                expected[parking] = [("OK", 0)]
            assert outcomes == expected, key
            assert [d["group"] for d in trace.dead] == ([dlq_q] if key in DEAD else [])
            # the publisher wrote one traceparent for this message id; every consumer read that one
            seen = {tp for (read_id, _), tp in read.items() if read_id == msg_id}
            assert len(seen) == 1 and seen.pop().split("-")[1] == trace_id_for(msg_id), key
    assert len(read) == 2 * N + len(DEAD)
