"""kafka-reset's target rule without a broker: index answers, broker fallback where it may lag, clamping."""

from __future__ import annotations

from collector.cli.kafka_reset import BrokerOffsets, reconcile_targets

# Three partitions on the broker, offsets 0..9 each, except partition 2 whose log starts at 4 (retention).
BROKER = BrokerOffsets(beginning={0: 0, 1: 0, 2: 4}, end={0: 10, 1: 10, 2: 10}, at_time={0: 8, 1: 9, 2: 7})


def test_the_index_answers_where_it_has_newer_messages() -> None:
    targets, warnings = reconcile_targets({0: 3, 1: 5, 2: 6}, {0: 10, 1: 10, 2: 10}, BROKER)
    assert targets == {0: 3, 1: 5, 2: 6} and warnings == []


def test_the_broker_decides_past_the_newest_indexed_message() -> None:
    # Partition 0's index stops at offset 6 (end 7) and the time is after it: the index may lag, offset 8 is right.
    targets, warnings = reconcile_targets({0: 7, 1: 5}, {0: 7, 1: 10}, BROKER)
    assert targets == {0: 8, 1: 5, 2: 7}  # partition 2: nothing indexed, the broker's answer
    assert len(warnings) == 2 and "partition 0" in warnings[0] and "lag" in warnings[0]
    assert "partition 2: nothing indexed" in warnings[1]


def test_a_lagging_index_that_agrees_with_the_broker_is_not_reported() -> None:
    broker = BrokerOffsets(beginning={0: 0}, end={0: 10}, at_time={0: 10})
    assert reconcile_targets({0: 10}, {0: 10}, broker) == ({0: 10}, [])


def test_targets_are_clamped_to_the_log() -> None:
    # Index offsets below the log start (deleted by retention) or past the end (a recreated topic).
    targets, warnings = reconcile_targets({0: 12, 1: 2, 2: 1, 3: 0}, {0: 20, 1: 10, 2: 10, 3: 5}, BROKER)
    assert targets == {0: 10, 1: 2, 2: 4}
    assert [w.split(":")[0] for w in warnings] == ["partition 3", "partition 0", "partition 2"]
    assert "not on the broker" in warnings[0] and "[4, 10]" in warnings[2]
