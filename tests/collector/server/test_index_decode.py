"""The index path's batch decode, ``collector.wirecheck.validate.decode_batch`` (the C validator, then
the events built without the Python checks), against ``tracehook.wire.decode_batch`` and the
independent wire oracle: for every trace-log record the same batch, or the same error (reason
and detail), so ``index_payloads`` indexes the same events and drops a bad record for the same
reason.  test_wirecheck.py holds the same comparison over its own valid, mutated and damaged batches.
"""

from __future__ import annotations

import random
from dataclasses import astuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_fuzz_cases import Chooser, Drawer, batch, cases, decoded, hostile_bodies, pack, wire_verdict

from collector.wirecheck import validate
from tracehook import wire

_SETTINGS = settings(max_examples=1000, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _agrees(body: bytes) -> bool:
    """Both decodes give the same answer, the one the oracle allows; True when the body is valid."""
    expected = decoded(wire.decode_batch, body)
    assert decoded(validate.decode_batch, body) == expected
    oracle = wire_verdict(body)
    if oracle.reasons:
        assert expected[0] in oracle.reasons
        return False
    got, _ = expected
    assert (astuple(got.header), len(got.events)) == (oracle.header, oracle.events)
    return True


def test_the_c_validator_is_on() -> None:
    assert validate.FAST_PATH  # else both sides above are wire.decode_batch, and nothing is compared


@_SETTINGS
@given(hostile_bodies())
def test_hostile_records_decode_as_the_wire_module_decodes_them(case) -> None:
    _agrees(case.body)


@_SETTINGS
@given(st.data())
def test_valid_records_decode_to_the_same_events(data: st.DataObject) -> None:
    c = Drawer(data.draw)
    assert _agrees(pack(batch(c, n=c.integer(0, 6))))


@pytest.mark.fallback  # with the extensions off: the Python decode against the independent oracle
def test_seeded_records_valid_and_hostile() -> None:
    valid = 0
    for case in cases(seed=27, count=3000):
        _agrees(case.body)
    for i in range(300):
        valid += _agrees(pack(batch(Chooser(random.Random(i)))))
    assert valid == 300
