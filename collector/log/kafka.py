"""The trace log on a Kafka topic: each accepted batch becomes one record, acknowledged by ``acks=all``.

``tracehook collector --log kafka://HOST:PORT[,HOST:PORT]/TOPIC`` writes through this class
instead of the file log (same :class:`collector.log.writer.TraceLogWriter` interface, same
ingest path).  Each record is::

    key        the batch's client id (utf-8): one client's batches stay in order on one partition
    value      the batch bytes exactly as received (what the file log frames)
    timestamp  the collector's receive time (ms), so `tracehook index --from/--to` reads a time window
    headers    receive_ms, client_id, seq (decimal ASCII / utf-8)

The client is **confluent-kafka** (librdkafka), of the three in the ``kafka`` extra: its
idempotent producer is the most complete (``enable.idempotence`` with epoch bumps after
timeouts, gap-free per-partition sequences, fatal errors reported as such), its delivery
reports give each record's error or offset, and ``flush(timeout)`` bounds the wait, which
suits the collector's group commit: a writer thread produces a group's records and waits
for all their acknowledgements at once, then every request of the group is answered.  Up to
:data:`CONCURRENT_APPENDS` groups wait for Kafka at the same time (one broker round trip
per group would otherwise cap a collector's throughput); a poller thread serves the
delivery reports.
kafka-python's idempotence support is recent and its future-per-record API slower;
aiokafka would fit the event loop but the ingest path already commits on a thread.

A batch whose acknowledgement does not come within ``produce_timeout_s`` (broker down,
no leader) gets 503 + Retry-After, and the library retries it (possibly through another
collector).  The record may still reach Kafka later; the index collapses such duplicates
(deterministic row and column keys), so queries show each event once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from collector.log.errors import LogUnavailable, StorageError
from collector.log.state import LogPosition
from collector.log.url import KafkaTopic

log = logging.getLogger(__name__)

DEFAULT_PRODUCE_TIMEOUT_S = 3.0
"""How long a group commit waits for Kafka's acknowledgement before answering 503 (the
library's request timeout is 5 s: the 503 must reach it first)."""
UNAVAILABLE_WAIT_S = 1.0
"""The wait while Kafka is known to be down: answer 503 quickly, but still notice it is back."""
PROBE_TIMEOUT_S = 2.0
"""Metadata request at start and by maintenance while unavailable."""
RECORD_OVERHEAD_BYTES = 4096
"""Room for the key, headers and record framing above the batch bytes in ``message.max.bytes``."""
MAX_RECORD_BYTES = 1_000_000_000 - RECORD_OVERHEAD_BYTES
"""The largest batch a Kafka log takes: librdkafka refuses a ``message.max.bytes`` above 10^9."""
CONCURRENT_APPENDS = 8
"""Group commits in flight to Kafka at once (the idempotent producer keeps up to 5 requests per
partition in flight with ordering kept)."""
POLL_INTERVAL_S = 0.05
HEADER_RECEIVE_MS = "receive_ms"
HEADER_CLIENT_ID = "client_id"
HEADER_SEQ = "seq"


class KafkaLog:
    """A :class:`collector.log.writer.TraceLogWriter` that produces to one Kafka topic."""

    kind = "kafka"
    concurrent_appends = CONCURRENT_APPENDS

    def __init__(self, topic: KafkaTopic, *, log_dir: str, max_record_bytes: int = 16 * 1024 * 1024,
                 produce_timeout_s: float = DEFAULT_PRODUCE_TIMEOUT_S) -> None:
        if produce_timeout_s <= 0:
            raise ValueError("produce_timeout_s must be positive")
        self.target = topic
        self.log_dir = log_dir
        self.max_record_bytes = max_record_bytes
        self.produce_timeout_s = produce_timeout_s
        self.last_sync_s = 0.0
        self.recovered_batches: list[tuple[str, int, int]] = []
        self.state = "connecting"
        """``connecting`` (before the first answer), ``ok``, or ``unavailable`` (ingest answers 503)."""
        self.error = ""
        self.produced_records = 0
        self.produced_bytes = 0
        self.failed_records = 0
        self._lock = threading.Lock()
        self._closed = False
        self._producer = self._new_producer()
        self._poller = threading.Thread(target=self._poll, name="kafka-log-poller", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        """Serve delivery reports and errors (librdkafka calls them only from poll)."""
        while not self._closed:
            self._producer.poll(POLL_INTERVAL_S)

    @classmethod
    def open(cls, topic: KafkaTopic, **options: Any) -> KafkaLog:
        """Create the producer and ask the cluster for the topic's metadata once (a broker that is
        down only makes the state ``unavailable``: the collector starts and answers 503 meanwhile)."""
        kafka_log = cls(topic, **options)
        kafka_log.probe()
        return kafka_log

    def _new_producer(self) -> Any:
        from confluent_kafka import Producer

        timeout_ms = int(self.produce_timeout_s * 1000)
        return Producer({
            "bootstrap.servers": self.target.bootstrap,
            "client.id": "tracehook-collector",
            "enable.idempotence": True,  # implies acks=all, retries, max.in.flight <= 5 with ordering kept
            "acks": "all",
            "linger.ms": 1,  # the group commit already batches; do not add much latency
            "message.max.bytes": self.max_record_bytes + RECORD_OVERHEAD_BYTES,
            # An undelivered record expires soon after its request got 503: the retry is the copy that counts.
            "message.timeout.ms": max(timeout_ms, 1000) + 2000,
            "request.timeout.ms": max(timeout_ms, 1000),
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self._on_error,
            # librdkafka's own lines (a refused connection each retry) go to logging, not stderr.
            "logger": logging.getLogger("collector.log.kafka.librdkafka"),
            "log.connection.close": False,
        })

    # -- state ----------------------------------------------------------------------------

    def _on_error(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._set_unavailable(f"all brokers down ({self.target.bootstrap})")
        elif err.fatal():
            self._set_unavailable(f"fatal producer error: {err.str()}")
        else:
            log.debug("kafka log: %s", err.str())

    def _set_unavailable(self, why: str) -> None:
        if self.state != "unavailable" or self.error != why:
            log.warning("kafka log %s unavailable: %s", self.target.url, why)
        self.state, self.error = "unavailable", why

    def _set_ok(self) -> None:
        if self.state == "unavailable":
            log.info("kafka log %s available again", self.target.url)
        self.state, self.error = "ok", ""

    def probe(self) -> bool:
        """Ask for the topic's metadata; updates :attr:`state`.  True when a broker answered."""
        from confluent_kafka import KafkaException

        try:
            meta = self._producer.list_topics(topic=self.target.topic, timeout=PROBE_TIMEOUT_S)
        except KafkaException as exc:
            self._set_unavailable(f"no broker answered within {PROBE_TIMEOUT_S:g}s: {exc.args[0].str()}")
            return False
        topic = meta.topics.get(self.target.topic)
        if topic is not None and topic.error is not None and topic.error.code() != 3:  # 3: unknown, auto-created
            self._set_unavailable(f"topic {self.target.topic}: {topic.error.str()}")
            return False
        self._set_ok()
        return True

    def health(self) -> dict[str, Any]:
        """The ``log`` section of ``/healthz``."""
        body: dict[str, Any] = {"kind": self.kind, "state": self.state, "bootstrap": self.target.bootstrap,
                                "topic": self.target.topic, "produced_records": self.produced_records,
                                "failed_records": self.failed_records}
        if self.error:
            body["error"] = self.error
        return body

    # -- appending ------------------------------------------------------------------------

    def append(self, entries: Sequence[tuple[int, str, int, bytes]]) -> list[int]:
        """Produce (receive_ms, client_id, seq, payload) records and wait until Kafka acknowledged
        all of them; return their offsets (per partition).  Raises :class:`LogUnavailable` (503)
        when some were not acknowledged in time.  Thread-safe: several groups may wait at once."""
        from confluent_kafka import KafkaException

        results: list[Any] = [None] * len(entries)
        left = [len(entries)]
        all_done = threading.Event()

        def delivered(i: int) -> Any:
            def report(err: Any, msg: Any) -> None:  # on the poller thread
                results[i] = err if err is not None else msg.offset()
                left[0] -= 1
                if not left[0]:
                    all_done.set()
            return report

        started = time.perf_counter()
        with self._lock:  # produce calls in order, and not into a producer being replaced
            if self._closed:
                raise StorageError("the trace log is closed")
            producer = self._producer
            try:
                for i, (receive_ms, client_id, seq, payload) in enumerate(entries):
                    client = client_id.encode("utf-8")
                    producer.produce(
                        self.target.topic, value=payload, key=client, timestamp=receive_ms,
                        headers=[(HEADER_RECEIVE_MS, str(receive_ms).encode()), (HEADER_CLIENT_ID, client),
                                 (HEADER_SEQ, str(seq).encode())],
                        on_delivery=delivered(i))
            except BufferError:
                self.failed_records += len(entries)
                raise LogUnavailable("the Kafka producer's queue is full (records not yet acknowledged)") from None
            except KafkaException as exc:
                self.failed_records += len(entries)
                self._renew_if_fatal(exc.args[0])
                raise LogUnavailable(f"producing to {self.target.url} failed: {exc.args[0].str()}") from None
        wait = UNAVAILABLE_WAIT_S if self.state == "unavailable" else self.produce_timeout_s
        all_done.wait(wait)
        self.last_sync_s = time.perf_counter() - started
        done = list(results)  # a late report may still land after the wait
        failed = [r for r in done if not isinstance(r, int)]
        if failed:
            errors = [r for r in failed if r is not None]
            why = errors[0].str() if errors else f"no acknowledgement within {wait:g}s"
            with self._lock:
                self.failed_records += len(failed)
                if errors and self._producer is producer:
                    self._renew_if_fatal(errors[0])
                self._set_unavailable(why)
            raise LogUnavailable(f"Kafka did not acknowledge {len(failed)} of {len(entries)} batch(es) "
                                 f"on {self.target.url}: {why}")
        with self._lock:
            self._set_ok()
            self.produced_records += len(entries)
            self.produced_bytes += sum(len(e[3]) for e in entries)
        return [int(r) for r in done]

    def _renew_if_fatal(self, err: Any) -> None:
        """A fatal idempotence error leaves the producer unusable: make a new one (a new producer id)."""
        if err is not None and err.fatal():
            log.warning("kafka log: fatal producer error, creating a new producer: %s", err.str())
            self._producer = self._new_producer()

    # -- the rest of the interface: a topic has no segments, sizes or retention of ours ----

    @property
    def recovery_pending(self) -> bool:
        return False

    def retry_recovery(self) -> list[tuple[str, int, int]]:
        return []

    def durable_end(self) -> LogPosition:
        """Records acknowledged by this process (the index follows Kafka's offsets, not ours)."""
        return LogPosition(self.produced_records, 0, 0)

    def total_bytes(self) -> int:
        """Batch bytes this process produced (the topic's size is Kafka's to report)."""
        return self.produced_bytes

    def segment_count(self) -> int:
        return 0

    def backlog_bytes(self) -> int:
        """0: the unindexed backlog is the index job's consumer lag, which Kafka reports."""
        return 0

    def roll_if_due(self, now_ms: int | None = None) -> None:
        """Maintenance: serve producer callbacks, and while unavailable ask whether Kafka is back."""
        if self.state == "unavailable":
            self.probe()

    def roll(self) -> None:
        return None

    def sealed(self) -> list[Any]:
        return []

    def apply_retention(self, retention_s: float, now_ms: int | None = None) -> list[Any]:
        """Nothing: the topic's ``retention.ms`` applies."""
        return []

    def close(self) -> None:
        """Wait (up to the produce timeout) for records still in flight, then drop the producer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._poller.join()
            left = self._producer.flush(self.produce_timeout_s)
            if left:
                log.warning("kafka log: %d record(s) not acknowledged at close", left)
