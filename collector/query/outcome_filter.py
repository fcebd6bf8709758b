"""Filtering message listings by a consumer group's outcome (``?group=&outcome=``).

No HTTP here: :func:`parse_filter` turns the two query values into an :class:`OutcomeFilter`,
whose :meth:`~OutcomeFilter.matches` is applied to each message of a listing by
:class:`collector.store.reader.TraceQuery` (server-side, page after page)::

    f = parse_filter("billing", "not_consumed")
    page = query.by_time("orders", begin, end, 20, match=f.matches, max_rows=FILTER_SCAN_ROWS)

Outcomes are :class:`collector.store.model.GroupOutcome`'s (``consumed``, ``retrying``,
``failed``, ``dead``, ``pending``) plus two that need a group:

- ``not_consumed``: the group has no successful consume of the message (no event at all, or any
  outcome but ``consumed``), failed sends included (the replay list leaves those out);
- ``not_received``: the broker stored the message (not a failed send) and the group has no
  consume or dead event for it: exactly what the overview's *not received* counts, and the
  listing its count links to.  Only messages the rollups count are kept: placed (a send, or a
  consume that knew the store time), so an unplaced message is in neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.query.errors import ParamError
from collector.store.model import CONSUMED, DEAD, FAILED, PENDING, RETRYING, MessageTrace

NOT_CONSUMED = "not_consumed"
NOT_RECEIVED = "not_received"
OUTCOMES = (CONSUMED, RETRYING, FAILED, DEAD, PENDING, NOT_CONSUMED, NOT_RECEIVED)
"""The values ``outcome`` takes."""
FILTER_SCAN_ROWS = 1000
"""Most index rows one filtered page reads: a rare match gives a short (even empty) page with a cursor,
never one request that scans a whole month."""


@dataclass(frozen=True)
class OutcomeFilter:
    """Keep messages where ``group`` (or, without one, any group) has ``outcome`` (or, without one, any)."""

    group: str | None
    outcome: str | None

    def matches(self, trace: MessageTrace) -> bool:
        """True when ``trace`` passes the filter."""
        if self.group is not None:
            found = trace.outcomes.get(self.group)
            if self.outcome == NOT_CONSUMED:
                return found is None or found.outcome != CONSUMED
            if self.outcome == NOT_RECEIVED:
                return found is None and trace.placed_ms is not None and not trace.never_stored
            return found is not None and (self.outcome is None or found.outcome == self.outcome)
        return any(o.outcome == self.outcome for o in trace.outcomes.values())


def parse_filter(group: str | None, outcome: str | None) -> OutcomeFilter | None:
    """The filter ``?group=&outcome=`` asks for; None when neither is given.

    Raises :class:`ParamError` (400) for an unknown outcome, or ``not_consumed`` or ``not_received``
    without a group (every group that never saw a message would match it).
    """
    group = group or None
    outcome = (outcome or "").strip().lower() or None
    if outcome is not None and outcome not in OUTCOMES:
        raise ParamError("bad_value", f"outcome must be one of {', '.join(OUTCOMES)}")
    if outcome in (NOT_CONSUMED, NOT_RECEIVED) and group is None:
        raise ParamError("missing_param", f"outcome={outcome} needs a group")
    if group is None and outcome is None:
        return None
    return OutcomeFilter(group, outcome)
