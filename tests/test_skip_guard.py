"""The skip guard (tests/fixtures/skips.py): a skip the suite does not list fails the run.

Each case runs a small test file through pytest with the guard loaded; without the guard the
unlisted skips below would pass as "skipped" and these tests fail.
"""

from __future__ import annotations

import pytest
from fixtures import skips

ALLOWED = next(iter(skips.ALLOWED_SKIPS))


def run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makepyfile(test_case=source)
    return pytester.runpytest("-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function",
                              plugins=[skips])


def test_the_guard_is_loaded_in_this_suite(request: pytest.FixtureRequest) -> None:
    assert request.config.pluginmanager.is_registered(skips)


@pytest.mark.parametrize("source", [
    "import pytest\ndef test_x():\n    pytest.skip('no broker here')\n",
    "import pytest\n@pytest.mark.skip(reason='later')\ndef test_x():\n    pass\n",
    "import pytest\n@pytest.mark.skipif(True, reason='needs root')\ndef test_x():\n    pass\n",
    "import pytest\n@pytest.fixture\ndef broker():\n    pytest.skip('no broker')\ndef test_x(broker):\n    pass\n",
], ids=["in-test", "skip-mark", "skipif-mark", "in-fixture"])
def test_an_unlisted_skip_fails_the_run(pytester: pytest.Pytester, source: str) -> None:
    result = run(pytester, source)
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == 0 and outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1, outcomes
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*skipped for a reason the suite does not allow*"])


@pytest.mark.parametrize("source", [
    "import pytest\npytest.importorskip('no_such_module_here')\ndef test_x():\n    pass\n",
    "import pytest\npytest.skip('no compiler', allow_module_level=True)\ndef test_x():\n    pass\n",
], ids=["importorskip", "module-level"])
def test_an_unlisted_module_skip_fails_the_run(pytester: pytest.Pytester, source: str) -> None:
    result = run(pytester, source)
    assert result.parseoutcomes().get("skipped", 0) == 0
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*skipped for a reason the suite does not allow*"])


def test_a_listed_skip_and_an_xfail_pass(pytester: pytest.Pytester) -> None:
    result = run(pytester, f"""
import pytest

@pytest.mark.skipif(True, reason={ALLOWED!r})
def test_listed():
    pass

def test_listed_at_run_time():
    pytest.skip({ALLOWED!r})

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_xfail():
    assert False

def test_passes():
    pass
""")
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
