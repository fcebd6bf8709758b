"""Query results as the JSON documents the native API returns (and ``tracehook query --json`` prints).

One place, so the HTTP API and the command line reading a store directly answer alike.
"""

from __future__ import annotations

import re
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
