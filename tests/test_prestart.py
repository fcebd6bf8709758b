"""Services started ahead (tests/fixtures/prestart.py): one after the other, each result handed to its fixture once."""

from __future__ import annotations

import os
import pathlib

import pytest
from fixtures import prestart


@pytest.fixture
def fake_services(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """Two services whose ``start`` appends its name to a file, prints a port and exits 0 (``b``: 3); their
    ``status`` says running once a file named ``<name>.running`` exists."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for name, code in (("a", 0), ("b", 3)):
        script = scripts / name
        script.write_text(f'#!/bin/sh\nif [ "$1" = status ]; then test -e "{tmp_path}/{name}.running"; exit; fi\n'
                          f'sleep 0.2\necho {name} >> "{tmp_path}/order"\necho 100{code}\nexit {code}\n')
        script.chmod(0o755)
    monkeypatch.setattr(prestart, "ROOT", tmp_path)
    services = {name: prestart.Service(name, "status", "start", "stop", lambda: dict(os.environ), frozenset(),
                                       frozenset({f"{name}_fixture"})) for name in ("a", "b")}
    monkeypatch.setattr(prestart, "SERVICES", services)
    return tmp_path


def test_starts_run_in_order_and_each_result_is_taken_once(fake_services: pathlib.Path) -> None:
    starts = prestart._Starts(["b", "a"])
    a = starts.take("a")  # waits for b's start, then a's
    assert a is not None and (a.returncode, a.stdout) == (0, "1000\n")
    assert (fake_services / "order").read_text() == "b\na\n"
    assert starts.untaken() == ["b"]
    b = starts.take("b")
    assert b is not None and (b.returncode, b.stdout) == (3, "1003\n")
    assert starts.take("b") is None and starts.take("c") is None and starts.untaken() == []


def test_a_service_running_when_its_turn_comes_is_not_started(fake_services: pathlib.Path) -> None:
    """Another session (an xdist worker) started it meanwhile: the fixture finds it running and reuses it."""
    (fake_services / "a.running").touch()
    starts = prestart._Starts(["a", "b"])
    assert starts.take("a") is None
    b = starts.take("b")
    assert b is not None and b.returncode == 3
    assert (fake_services / "order").read_text() == "b\n"


def test_needed_lists_services_in_the_order_of_first_use() -> None:
    class Item:
        def __init__(self, *fixtures: str) -> None:
            self.fixturenames = list(fixtures)

        def get_closest_marker(self, name: str) -> None:
            return None

    items = [Item("tmp_path"), Item("kafka_bootstrap"), Item("ready_hbase_url", "hbase_port"), Item("kafka_bootstrap")]
    assert prestart.needed(items) == ["kafka", "hbase"]  # type: ignore[arg-type]
