"""The fallback pass's own check (tests/fixtures/fallback.py): a run with the extensions off that never
reaches a Python path fails, naming it."""

from __future__ import annotations

import os
import pathlib

import pytest

from collector import extensions

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow  # a pytest subprocess: several seconds
def test_a_fallback_run_that_never_reaches_a_python_path_fails(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(extensions.ENV_NO_EXTENSIONS, "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(ROOT), str(ROOT / "tests"))))
    pytester.makepyfile(test_idle="""
        import pytest

        @pytest.mark.fallback
        def test_idle():
            from collector.wirecheck import validate
            from tracehook import wire

            batch = wire.encode_batch(wire.BatchHeader("c", 1, "app", "host", 1), [])
            assert validate.check_batch(batch)[1] == 0
    """)
    result = pytester.runpytest_subprocess("-p", "fixtures.fallback", "-m", "fallback", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.re_match_lines([r"fallback pass: these Python paths never ran: (?!.*_wirecheck).*_rowbuild"])
