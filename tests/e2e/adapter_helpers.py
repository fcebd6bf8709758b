"""The chain every adapter e2e test runs: tracer (or an OTel exporter) -> real collector -> sealed trace log -> local index."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import Callable, Iterator

from fixtures.collector_process import CollectorProcess

import tracehook
from collector.store import open_store
from collector.store.reader import TraceQuery
from tests.fixtures.indexing import index_sealed, seal_log


def collect_and_index(tmp_path: pathlib.Path, run: Callable[[tracehook.Tracer], None]) -> str:
    """Run ``run(tracer)`` with a tracer sending to a collector, seal its log and index it; returns the store URL."""

    def with_tracer(url: str) -> None:
        tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(url,), linger_s=0.02))
        try:
            run(tracer)
            assert tracer.flush(10)
        finally:
            tracer.close()

    return collect_and_index_url(tmp_path, with_tracer)


def collect_and_index_url(tmp_path: pathlib.Path, run: Callable[[str], None]) -> str:
    """Run ``run(collector_url)`` against a real collector (it sends however it likes: the library,
    OTLP), seal the log and index it; returns the store URL."""
    collector = CollectorProcess(str(tmp_path), "--durability", "os", store=None)
    try:
        run(collector.url)
        seal_log(collector.url, str(tmp_path / "log"))
    finally:
        collector.stop()
    store_url = f"local:{tmp_path / 'index.sqlite3'}"
    index_sealed(str(tmp_path / "log"), store_url)
    return store_url


@contextlib.contextmanager
def trace_query(store_url: str) -> Iterator[TraceQuery]:
    """A query over the indexed store, closed afterwards."""
    store = open_store(store_url)
    try:
        yield TraceQuery(store)
    finally:
        store.close()
