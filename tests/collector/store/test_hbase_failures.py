"""HBase going away mid-write: a named error, nothing hangs, and a re-run completes identically.

The connection is cut with a TCP relay between happybase and the real Thrift server,
so the shared HBase other tests use keeps running.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from index_helpers import consumed, message, unique

from collector.store import open_store
from collector.store.errors import StoreUnavailableError
from collector.store.indexer import index_records

pytestmark = [pytest.mark.hbase, pytest.mark.slow]


class Relay:
    """Forwards 127.0.0.1:<port> to the Thrift server until :meth:`cut`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.open = True
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                if not self.open:
                    client.close()
                    continue
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            self.open = False
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.sockets.clear()

    def restore(self) -> None:
        with self.lock:
            self.open = True

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def relay(hbase_port: int) -> Iterator[Relay]:
    r = Relay(hbase_port)
    yield r
    r.close()


def test_cut_mid_run_raises_then_rerun_matches_a_clean_index(relay, make_hbase_url, hbase_port, tmp_path, dump_store):
    topic = unique("t")
    records = []
    for i in range(3000):
        records += message(topic, f"m{i}", 1000 + i, keys=f"k{i % 10}", queue=i % 4, offset=i)
        records += consumed(topic, f"m{i}", 1000 + i, "g", queue=i % 4, offset=i)
    url = make_hbase_url().replace(f":{hbase_port}?", f":{relay.port}?")
    store = open_store(url)

    def cut_halfway():
        for n, record in enumerate(records):
            if n == len(records) // 2:
                relay.cut()
            yield record

    with pytest.raises(StoreUnavailableError):
        index_records(store, cut_halfway(), batch_size=500)
    relay.restore()
    assert index_records(store, records, batch_size=500) == len(records)

    reference = open_store(f"local:{tmp_path / 'ref.sqlite3'}")
    index_records(reference, records)
    assert dump_store(store) == dump_store(reference)
    reference.close()
    store.close()


@pytest.mark.hbase
@pytest.mark.slow
def test_reopening_with_another_ttl_warns(make_hbase_url, caplog) -> None:
    url = make_hbase_url(ttl_days="1")
    open_store(url).close()
    with caplog.at_level("WARNING", logger="collector.store.hbase"):
        open_store(url).close()
        assert not caplog.records  # same TTL: quiet
        open_store(url.replace("ttl_days=1", "ttl_days=2")).close()
    assert "another TTL than the 172800 s" in caplog.text and "86400 s" in caplog.text
    assert "_messages" in caplog.text
