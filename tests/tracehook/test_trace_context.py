"""Trace context checked against the OpenTelemetry SDK: what tracehook writes, OTel accepts, and back.

The events are caught at the tracer's queue (``tracer._put``), so no collector is involved.
"""

from __future__ import annotations

import math
import subprocess
import sys
from typing import Any

import pytest
from fixtures.deps import require
from hypothesis import example, given, settings
from hypothesis import strategies as st

require("opentelemetry.sdk.trace")  # the dev extra: a missing SDK fails the run

from opentelemetry import trace as otel_trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased  # noqa: E402
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: E402

import tracehook  # noqa: E402
from tracehook import context, wire  # noqa: E402
from tracehook.wire import Event, EventType  # noqa: E402

PROPAGATOR = TraceContextTextMapPropagator()
OTEL = TracerProvider().get_tracer("tests")  # not the global provider: start_as_current_span still sets the context


def otel_parent(headers: dict[str, str]) -> Any:
    """The span context OpenTelemetry extracts from ``headers`` (INVALID_SPAN's when it rejects them)."""
    return otel_trace.get_current_span(PROPAGATOR.extract(headers)).get_span_context()


def caught(tracer: tracehook.Tracer) -> list[Event]:
    events: list[Event] = []
    tracer._put = lambda e: events.append(Event(*e))  # type: ignore[method-assign]
    return events


@pytest.fixture
def tracer(make_tracer: Any) -> tracehook.Tracer:
    return make_tracer()


# -- 2: every message id gives a traceparent OpenTelemetry accepts ---------------------------

@settings(max_examples=300)
@given(st.one_of(st.text(min_size=1), st.from_regex(r"[0-9a-fA-F_x \-+]{30,34}", fullmatch=True)))
@example("0x0123456789abcdef0123456789abcd")  # int(x, 16) took these as 32 hex digits
@example("0123456789abcdef_0123456789abcde")
@example("-0123456789abcdef0123456789abcde")
@example(" 0123456789abcdef0123456789abcde")
@example("0123456789ABCDEF0123456789ABCDEF")
@example("0" * 32)
def test_any_message_id_gives_a_traceparent_otel_accepts(msg_id: str) -> None:
    headers: dict[str, str] = {}
    assert tracehook.inject_headers(headers, msg_id) == msg_id
    parent = otel_parent(headers)
    assert parent.is_valid and parent.is_remote
    assert f"{parent.trace_id:032x}" == context.trace_id_for(msg_id) == tracehook.extract_headers(headers).trace_id
    assert context.is_trace_id(context.trace_id_for(msg_id))


def test_only_lower_case_hex_passes_through() -> None:
    good = "0af7651916cd43dd8448eb211c80319c"
    assert context.trace_id_for(good) == good
    for other in (good.upper(), "0x" + good[2:], "_" + good[1:], "-" + good[1:], " " + good[1:], "0" * 32):
        assert context.trace_id_for(other) != other.lower()


# -- 3: generated ids: unique, and ratio sampling keeps its ratio -----------------------------

def test_generated_ids_are_unique_with_random_low_halves() -> None:
    ids = [tracehook.new_msg_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)
    assert len({i[16:] for i in ids}) == len(ids)  # the low 64 bits are not a counter
    assert all(context.is_trace_id(i) for i in ids)


def test_otel_ratio_sampler_keeps_its_ratio_of_tracehook_traces(tracer: tracehook.Tracer) -> None:
    n, ratio = 40_000, 0.01
    sampler = TraceIdRatioBased(ratio)
    kept = 0
    for _ in range(n):
        headers: dict[str, str] = {}
        tracer.record_send("orders", headers=headers)
        result = sampler.should_sample(PROPAGATOR.extract(headers), otel_parent(headers).trace_id, "process")
        kept += result.decision.is_sampled()
    # Binomial(n, ratio): 6 standard deviations either side (a false failure about once in 10**9 runs).
    # The old ids (random prefix + counter) kept all of them.
    spread = 6 * math.sqrt(n * ratio * (1 - ratio))
    assert abs(kept - n * ratio) <= spread, kept


# -- 4: the sampled flag ---------------------------------------------------------------------

def test_sampled_flag_follows_the_configured_ratio_as_otel_would(make_tracer: Any) -> None:
    tracer = make_tracer(trace_sample_ratio=0.25)
    sampler = TraceIdRatioBased(0.25)
    flags = []
    for _ in range(2_000):
        headers: dict[str, str] = {}
        tracer.record_send("orders", headers=headers)
        parent = otel_parent(headers)
        assert parent.trace_flags.sampled == sampler.should_sample(None, parent.trace_id, "p").decision.is_sampled()
        flags.append(headers["traceparent"][-2:])
    assert set(flags) == {"02", "03"}  # level-2 "random" always set on generated ids, sampled at the ratio


def test_sampled_flag_is_a_documented_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tracehook.TracerConfig().trace_sample_ratio == 1.0
    monkeypatch.setenv("TRACEHOOK_TRACE_SAMPLE_RATIO", "0")
    assert tracehook.TracerConfig.from_env().trace_sample_ratio == 0.0
    monkeypatch.setenv("TRACEHOOK_TRACE_SAMPLE_RATIO", "2")  # bad env values are logged and defaulted
    assert tracehook.TracerConfig.from_env().trace_sample_ratio == 1.0
    with pytest.raises(tracehook.ConfigError, match="trace_sample_ratio"):
        tracehook.TracerConfig(trace_sample_ratio=-0.5)
    headers: dict[str, str] = {}
    tracehook.Tracer(tracehook.TracerConfig(trace_sample_ratio=0.0)).record_send("t", headers=headers)
    assert not otel_parent(headers).trace_flags.sampled


# -- 1 and 4: inside an active OpenTelemetry span ---------------------------------------------

@pytest.mark.parametrize("sampler_on", [True, False])
def test_send_inside_an_active_span_continues_its_trace(make_tracer: Any, sampler_on: bool) -> None:
    tracer = make_tracer(trace_sample_ratio=1.0)
    events = caught(tracer)
    provider = TracerProvider(sampler=ParentBased(root=ALWAYS_OFF) if not sampler_on else None)
    with provider.get_tracer("app").start_as_current_span("handle order") as app_span:
        app = app_span.get_span_context()
        headers: dict[str, str] = {}
        msg_id = tracer.record_send("orders", headers=headers)
        bare_id = tracer.record_send("orders")  # no headers: the event still names the app's trace
    parent = otel_parent(headers)
    assert parent.trace_id == app.trace_id and parent.span_id != app.span_id
    assert parent.trace_flags.sampled is sampler_on  # the active span's decision, not the ratio
    pub, bare = events
    assert (pub.msg_id, pub.trace_id, pub.span_id) == (msg_id, f"{app.trace_id:032x}", f"{parent.span_id:016x}")
    assert (bare.msg_id, bare.trace_id) == (bare_id, f"{app.trace_id:032x}") and context.parse_traceparent(
        f"00-{bare.trace_id}-{bare.span_id}-01")
    # An OTel consumer (parent-based sampling) continues the same trace as a child of the send,
    # and records its span only if the app's span was sampled.
    with OTEL.start_as_current_span("consume", context=PROPAGATOR.extract(headers)) as consumer:
        assert consumer.get_span_context().trace_id == app.trace_id
        assert consumer.is_recording() is sampler_on
        if sampler_on:
            assert consumer.parent is not None and consumer.parent.span_id == parent.span_id


def test_without_an_active_span_the_message_has_its_own_trace(tracer: tracehook.Tracer) -> None:
    events = caught(tracer)
    headers: dict[str, str] = {}
    msg_id = tracer.record_send("orders", headers=headers)
    tracer.record_send("orders", "plain-id")
    pub, plain = events
    assert otel_parent(headers).trace_id == int(msg_id, 16)
    assert pub.trace_id == "" and pub.span_id == headers["traceparent"].split("-")[2]
    assert wire.trace_id_of(pub) == msg_id and wire.trace_id_of(plain) == context.trace_id_for("plain-id")
    assert plain.span_id == ""  # nothing propagated, no span to name


def test_an_otel_injected_traceparent_is_kept_and_recorded(tracer: tracehook.Tracer) -> None:
    events = caught(tracer)
    with OTEL.start_as_current_span("send") as send:
        headers: dict[str, str] = {}
        PROPAGATOR.inject(headers)
    theirs = headers["traceparent"]
    msg_id = tracer.record_send("orders", headers=headers)
    with tracer.consume("orders", None, "billing", headers=headers):
        pass
    assert headers["traceparent"] == theirs
    ids = {(e.msg_id, e.trace_id, e.span_id) for e in events}
    assert ids == {(msg_id, f"{send.get_span_context().trace_id:032x}", f"{send.get_span_context().span_id:016x}")}


def test_tracehook_never_imports_opentelemetry() -> None:
    code = (
        "import sys, tracehook\n"
        "t = tracehook.Tracer(tracehook.TracerConfig())\n"
        "h = {}\n"
        "t.record_send('orders', headers=h); t.record_send('orders')\n"
        "t.consume('orders', None, 'g', headers=h).finish()\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path(__file__).parents[2]))


# -- 6: a consumer that only has a traceparent ------------------------------------------------

def test_consumer_with_only_a_traceparent_gets_a_derived_id(tracer: tracehook.Tracer) -> None:
    events = caught(tracer)
    with OTEL.start_as_current_span("send") as send:
        headers: list[tuple[str, bytes]] = []
        PROPAGATOR.inject(headers, setter=_PairsSetter())
    with tracer.consume("orders", None, "billing", queue=2, offset=41, headers=headers):
        pass
    tracer.consume_batch("orders", "audit", [{"queue": 2, "offset": 41, "headers": headers}]).finish()
    assert tracer.stats()["dropped"].get("invalid", 0) == 0
    assert len(events) == 4
    sent = send.get_span_context()
    for event in events:
        assert event.msg_id == context.derived_msg_id("orders", 2, 41) == "kafka:orders/2/41"
        assert (event.trace_id, event.span_id) == (f"{sent.trace_id:032x}", f"{sent.span_id:016x}")
    # Without a place there is nothing to derive from: still counted as invalid.
    tracer.consume("orders", None, "billing", headers=headers).finish()
    assert tracer.stats()["dropped"]["invalid"] == 1


class _PairsSetter:
    """OpenTelemetry setter for Kafka-style headers (a list of (str, bytes))."""

    def set(self, carrier: list[tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode()))


def test_derived_ids_take_apart_again() -> None:
    for topic in ("orders", "a.b-c_d", "x/y"):
        name, partition, offset = context.derived_msg_id(topic, 7, 2**40).removeprefix("kafka:").rsplit("/", 2)
        assert (name, int(partition), int(offset)) == (topic, 7, 2**40)


def test_event_types_carry_trace_fields_in_pairs(tracer: tracehook.Tracer) -> None:
    events = caught(tracer)
    headers: dict[str, str] = {}
    tracer.record_send("orders", headers=headers)
    with tracer.consume("orders", None, "billing", headers=headers):
        pass
    assert [e.type for e in events] == [EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER]
    assert len({(e.trace_id, e.span_id) for e in events}) == 1 and events[0].span_id
