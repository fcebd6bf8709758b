"""Query results as the JSON documents the native API returns (and ``tracehook query --json`` prints).

One place, so the HTTP API and the command line reading a store directly answer alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collector.query.timeline import build_timeline

TRACE_ID = re.compile(r"[0-9a-f]{32}")


def as_dict(result: Any) -> dict[str, Any]:
    """A store result (``MessageTrace``, ``MessageSummary``) as a JSON-ready dict; None gives {}."""
    if result is None:
        return {}
    return dict(result) if isinstance(result, dict) else result.to_json()


def page_dict(page: Any) -> dict[str, Any]:
    """A store ``Page`` as ``{"items": [...], "next_cursor": str | None}``."""
    return {"items": [as_dict(s) for s in page.items], "next_cursor": page.next_cursor or None}


def trace_document(trace: Any) -> dict[str, Any]:
    """The trace as the store renders it, plus ``timeline`` rows for the web page."""
    doc = as_dict(trace)
    doc["timeline"] = build_timeline(doc)
    return doc


def trace_events(trace: Any) -> Iterator[dict[str, Any]]:
    """Every event dict a ``MessageTrace`` holds, in each of its views (send, consume attempts'
    before / after, tx, dead, events, replays); the views share dicts, so one may come twice."""
    if trace.send is not None:
        yield trace.send
    for attempts in trace.consumes.values():
        for attempt in attempts:
            yield from (e for e in (attempt.get("before"), attempt.get("after")) if e is not None)
    for view in (trace.tx, trace.dead, trace.events, trace.replays):
        yield from view


def withhold_bodies(trace: Any) -> None:
    """Drop the captured bodies of a ``MessageTrace`` (for a reader without the body scope):
    each such event keeps ``body: null`` and gets ``body_withheld: true``."""
    for event in trace_events(trace):
        if event.get("body") is not None:
            event["body"] = None
            event["body_withheld"] = True


def has_body(trace: Any) -> bool:
    """Whether any event of a ``MessageTrace`` carries a captured body."""
    return any(event.get("body") is not None for event in trace_events(trace))


def body_document(found: Any, may_read: bool) -> dict[str, Any]:
    """The message-level body fields of ``GET /v1/messages/{id}`` from a
    :class:`collector.store.bodies.BodyLookup`: ``body`` (hex, inflated), ``body_len``, ``body_truncated``,
    ``raw_key``, ``raw_headers``; without the body scope (``may_read`` False) ``body``, ``raw_key`` and
    ``raw_headers`` are null and ``body_withheld`` is true; ``body_erased`` once erased."""
    if found.erased:
        return {"body": None, "body_erased": True}
    if found.kept is None:
        return {"body": None}
    doc: dict[str, Any] = found.kept.to_json()
    if not may_read:
        doc.update(body=None, raw_key=None, raw_headers=None, body_withheld=True)
        doc.pop("body_corrupt", None)
    return doc
