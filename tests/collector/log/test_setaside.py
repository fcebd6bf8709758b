"""The set-aside file beside an index checkpoint: one entry per place in the log, kept while the log
keeps the record, and never lost between the job's appends and ``tracehook set-aside reindex``'s rewrites."""

from __future__ import annotations

import threading
from typing import Any

from collector.log import setaside
from collector.log.setaside import SetAside


def _entry(offset: int, event: int = 0, reason: str = "KeyError: 'x'") -> SetAside:
    return SetAside(base=0, offset=offset, event=event, msg_id=f"m{offset}", topic="t", type="PUB", reason=reason,
                    set_aside_ms=1)


def test_a_batch_recorded_twice_is_one_entry_and_prune_follows_retention(tmp_path: Any) -> None:
    checkpoint = str(tmp_path / "ck")
    assert setaside.read(checkpoint) == [] and setaside.count(checkpoint) == 0
    assert setaside.record(checkpoint, [_entry(5), _entry(9, 1)]) == 2
    assert setaside.record(checkpoint, [_entry(9, 1), _entry(12)]) == 1  # a batch redone after a crash
    assert [e.key for e in setaside.read(checkpoint)] == [(0, 5, 0), (0, 9, 1), (0, 12, 0)]

    assert setaside.prune(checkpoint, first_offset=9) == 1  # retention deleted the segment holding offset 5
    assert [e.offset for e in setaside.read(checkpoint)] == [9, 12]

    setaside.update(checkpoint, remove=[(0, 9, 1)], add=[_entry(12, reason="still failing")])
    assert [(e.offset, e.reason) for e in setaside.read(checkpoint)] == [(12, "KeyError: 'x'")]
    setaside.update(checkpoint, remove=[(0, 12, 0)], add=[_entry(12, reason="still failing")])
    assert [(e.offset, e.reason) for e in setaside.read(checkpoint)] == [(12, "still failing")]
    setaside.update(checkpoint, remove=[(0, 12, 0)])
    assert setaside.count(checkpoint) == 0 and not (tmp_path / "ck" / setaside.SET_ASIDE_FILE).exists()


def test_appends_during_rewrites_are_not_lost(tmp_path: Any) -> None:
    """The job appends while an operator's reindex removes other entries: every append survives."""
    checkpoint = str(tmp_path / "ck")
    setaside.record(checkpoint, [_entry(i) for i in range(100)])

    def job() -> None:
        for i in range(100, 300):
            setaside.record(checkpoint, [_entry(i)])

    appender = threading.Thread(target=job)
    appender.start()
    for i in range(100):
        setaside.update(checkpoint, remove=[(0, i, 0)])
    appender.join()
    assert [e.offset for e in setaside.read(checkpoint)] == list(range(100, 300))


def test_a_torn_last_line_is_skipped_and_the_next_append_kept(tmp_path: Any) -> None:
    checkpoint = str(tmp_path / "ck")
    setaside.record(checkpoint, [_entry(1)])
    with open(setaside.path_of(checkpoint), "a", encoding="utf-8") as f:
        f.write('{"base": 0, "offs')  # a crash mid-append
    assert [e.offset for e in setaside.read(checkpoint)] == [1]
    setaside.record(checkpoint, [_entry(2)])  # the next append starts a line of its own
    assert [e.offset for e in setaside.read(checkpoint)] == [1, 2]
