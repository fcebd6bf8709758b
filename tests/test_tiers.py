"""The tiers (tests/fixtures/tiers.py): ``-m "not slow"`` leaves out every test that needs a service.

Each case collects a small test file with the plugin loaded; without it the service tests below
would stay in the quick loop and these tests fail.
"""

from __future__ import annotations

import pytest
from fixtures import tiers

SOURCE = """
import pytest

@pytest.fixture
def spark():
    raise AssertionError("a deselected test must not start Spark")

@pytest.fixture
def session_of(spark):
    return spark

def test_plain():
    pass

@pytest.mark.kafka
def test_marked():
    pass

class TestMarkedClass:
    pytestmark = pytest.mark.hbase

    def test_in_class(self):
        pass

def test_fixture(spark):
    pass

def test_fixture_underneath(session_of):
    pass

@pytest.mark.parametrize("backend", ["local", pytest.param("hbase", marks=pytest.mark.hbase)])
def test_param(backend):
    pass
"""


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    pytester.makepyfile(test_case=SOURCE)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    slow\n    kafka\n    hbase\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", *args, plugins=[tiers])
    return sorted(line.split("::", 1)[1] for line in result.outlines if line.startswith("test_case.py::"))


def test_the_plugin_is_loaded_in_this_suite(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.is_registered(tiers)


def test_the_quick_loop_keeps_only_what_needs_no_service(pytester: pytest.Pytester) -> None:
    assert collected(pytester, "-m", "not slow") == ["test_param[local]", "test_plain"]


def test_the_full_suite_keeps_everything(pytester: pytest.Pytester) -> None:
    assert collected(pytester) == ["TestMarkedClass::test_in_class", "test_fixture", "test_fixture_underneath",
                                   "test_marked", "test_param[hbase]", "test_param[local]", "test_plain"]
    assert collected(pytester, "-m", "slow") == ["TestMarkedClass::test_in_class", "test_fixture",
                                                 "test_fixture_underneath", "test_marked", "test_param[hbase]"]


HYPOTHESIS_SOURCE = """
import pathlib
from hypothesis import given, settings, strategies as st

@settings(max_examples=200, database=None, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_drawn(value):
    with open(pathlib.Path(__file__).with_name("drawn.txt"), "a") as f:
        f.write("x")
"""


def drawn(pytester: pytest.Pytester, *args: str) -> int:
    pytester.makepyfile(test_case=HYPOTHESIS_SOURCE)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    slow\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *args, plugins=[tiers])
    result.assert_outcomes(passed=1)
    return len((pytester.path / "drawn.txt").read_text())


def test_the_quick_loop_draws_a_quarter_of_the_examples(pytester: pytest.Pytester) -> None:
    assert drawn(pytester, "-m", "not slow") == 50


@pytest.mark.parametrize("args", [(), ("-m", "slow or not slow"), ("-k", "drawn")], ids=["all", "both", "k"])
def test_the_full_suite_draws_every_example(pytester: pytest.Pytester, args: tuple[str, ...]) -> None:
    assert drawn(pytester, *args) == 200


@pytest.mark.parametrize("expression, quick", [("not slow", True), ("not slow and not hbase", True),
                                               ("slow", False), ("spark", False), ("slow or not slow", False),
                                               ("", False)])
def test_the_quick_loop_is_a_run_without_slow_tests(pytester: pytest.Pytester, expression: str, quick: bool) -> None:
    config = pytester.parseconfig(*(["-m", expression] if expression else []))
    assert tiers.is_quick_loop(config) is quick


def test_quick_examples() -> None:
    assert [tiers.quick_examples(n) for n in (8, 25, 60, 100, 300, 1000)] == [8, 25, 25, 25, 75, 250]
