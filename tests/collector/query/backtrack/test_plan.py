"""plan_reset: RocketMQ's broker rule, rewind-only unless forced, on offsets from anywhere."""

from __future__ import annotations

from collector.query.backtrack import FORWARD, KEEP, REWIND, SET, PlanEntry, ResetPlan, plan_reset


def test_rewind_only_moves_back_and_never_forward() -> None:
    entries = plan_reset({0: 5, 1: 10, 2: 20}, {0: 8, 1: 10, 2: 12})
    assert entries == [
        PlanEntry(0, 5, 8, 5, REWIND),
        PlanEntry(1, 10, 10, 10, KEEP),
        PlanEntry(2, 20, 12, 12, KEEP),  # moving to 20 would skip 12..19, which the group has not read
    ]


def test_force_moves_every_queue_to_its_target() -> None:
    entries = plan_reset({0: 5, 1: 10, 2: 20}, {0: 8, 1: 10, 2: 12}, force=True)
    assert [(e.planned, e.action) for e in entries] == [(5, REWIND), (10, KEEP), (20, FORWARD)]


def test_unknown_positions_and_missing_targets() -> None:
    entries = plan_reset({0: 5}, {1: 9})
    assert entries == [PlanEntry(0, 5, None, 5, SET), PlanEntry(1, 9, 9, 9, KEEP)]


def test_plan_document() -> None:
    plan = ResetPlan("orders", "billing", 123, False, tuple(plan_reset({0: 5, 1: 20}, {0: 8, 1: 12})))
    assert plan.offsets() == {0: 5, 1: 12}
    assert plan.changes() == {0: 5}
    doc = plan.to_json()
    assert doc["queues"][0] == {"queue": 0, "target": 5, "current": 8, "planned": 5, "action": "rewind"}
    assert (doc["topic"], doc["group"], doc["time_ms"], doc["force"]) == ("orders", "billing", 123, False)
