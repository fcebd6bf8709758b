"""Adapter tests: a tracer per test that delivers to a real local capturing HTTP collector."""

from __future__ import annotations

import importlib.util
import pathlib
import uuid
from collections.abc import Iterator

import pytest

import tracehook
from tracehook import wire

_STUB_PATH = pathlib.Path(__file__).resolve().parents[1] / "stub_collector.py"


def _load_stub() -> type:
    # the library tests' capturing collector; loaded by path because tests/ dirs are not packages
    spec = importlib.util.spec_from_file_location("_adapters_stub_collector", _STUB_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.StubCollector


class Capture:
    """A tracer wired to a stub collector; ``events()`` flushes and returns what arrived."""

    def __init__(self, stub: object, tracer: tracehook.Tracer) -> None:
        self.stub = stub
        self.tracer = tracer

    def events(self) -> list[wire.Event]:
        assert self.tracer.flush(10.0), self.tracer.stats()
        return list(self.stub.events())  # type: ignore[attr-defined]

    def of(self, event_type: int) -> list[wire.Event]:
        return [e for e in self.events() if e.type == event_type]


@pytest.fixture
def capture() -> Iterator[Capture]:
    stub = _load_stub()()
    stub.start()
    tracer = tracehook.Tracer(tracehook.TracerConfig.from_env(app="adapters-test", collectors=[stub.url],
                                                              linger_s=0.01))
    try:
        yield Capture(stub, tracer)
    finally:
        tracer.close()
        stub.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
