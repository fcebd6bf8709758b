"""scripts/hbase: which Python checks readiness, where the jars go, and cleaning up the data."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "hbase"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


def _run(script: pathlib.Path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script), command], env=env, capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def python_without_happybase(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory whose ``python3`` and ``python`` are real Pythons that cannot import happybase."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "python"):
        wrapper = bin_dir / name
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')  # -S: no site-packages
        wrapper.chmod(0o755)
    return bin_dir


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HBASE_", "TRACEHOOK_PYTHON"))}
    return {**env, **extra}


def test_start_reports_a_missing_happybase_at_once(tmp_path: pathlib.Path, python_without_happybase) -> None:
    run_dir, cache_dir = tmp_path / "run", tmp_path / "cache"
    env = _env(PATH=f"{python_without_happybase}:{SYSTEM_PATH}", HBASE_RUN_DIR=str(run_dir),
               HBASE_CACHE_DIR=str(cache_dir))
    result = _run(SCRIPT, "start", env)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"scripts/hbase: happybase is not importable by {python_without_happybase}/python3 (ModuleNotFoundError: "
        "No module named 'happybase'): pip install happybase into it, or set TRACEHOOK_PYTHON to the python "
        "tracehook runs on"
    ]
    # Reported before anything was fetched or launched (not after the 240 s readiness wait).
    assert not cache_dir.exists()
    assert not list(run_dir.glob("*.pid"))


def test_tracehook_python_is_the_interpreter_that_checks(tmp_path: pathlib.Path, python_without_happybase) -> None:
    env = _env(PATH=f"{python_without_happybase}:{SYSTEM_PATH}", HBASE_RUN_DIR=str(tmp_path / "run"),
               TRACEHOOK_PYTHON=str(python_without_happybase / "python3"))
    result = _run(SCRIPT, "start", env)
    assert result.returncode == 1 and "happybase is not importable by" in result.stderr
    env["TRACEHOOK_PYTHON"] = str(tmp_path / "no-such-python")
    result = _run(SCRIPT, "start", env)
    assert result.stderr == f"scripts/hbase: TRACEHOOK_PYTHON={tmp_path / 'no-such-python'} is not an executable\n"


@pytest.mark.hbase
def test_check_runs_on_tracehook_python_when_path_has_another(hbase_port: int, python_without_happybase) -> None:
    env = {**os.environ, "PATH": f"{python_without_happybase}:{SYSTEM_PATH}", "TRACEHOOK_PYTHON": sys.executable}
    result = _run(SCRIPT, "check", env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"HBase answers on 127.0.0.1:{hbase_port}\n"
    del env["TRACEHOOK_PYTHON"]
    result = _run(SCRIPT, "check", env)
    assert result.returncode == 1 and "happybase is not importable by" in result.stderr


FETCHED_9_9_9 = "/jars/a.jar:/jars/hbase-compression-aircompressor-9.9.9.jar\n"
"""The classpath of a complete fetch of (made-up) HBase 9.9.9: the codec jar is the newest one fetch adds."""


def test_jar_cache_dir_comes_from_hbase_cache_dir(tmp_path: pathlib.Path) -> None:
    # A copy of the script in a fresh "repo", so its default cache (<repo>/.cache/hbase) is empty.
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    script = repo / "scripts" / "hbase"
    shutil.copy(SCRIPT, script)
    cache = tmp_path / "shared-cache"
    (cache / "9.9.9").mkdir(parents=True)
    (cache / "9.9.9" / "classpath.txt").write_text(FETCHED_9_9_9)
    env = _env(HBASE_VERSION="9.9.9", HBASE_CACHE_DIR=str(cache))
    result = _run(script, "fetch", env)
    assert (result.returncode, result.stdout) == (0, f"HBase 9.9.9 already fetched: {cache}/9.9.9\n")
    assert not (repo / ".cache").exists()

    (repo / ".cache" / "hbase" / "9.9.9").mkdir(parents=True)  # the default, without the variable
    (repo / ".cache" / "hbase" / "9.9.9" / "classpath.txt").write_text(FETCHED_9_9_9)
    result = _run(script, "fetch", _env(HBASE_VERSION="9.9.9"))
    assert result.stdout == f"HBase 9.9.9 already fetched: {repo}/.cache/hbase/9.9.9\n"


def test_a_cache_fetched_before_the_codec_jars_is_fetched_again(tmp_path: pathlib.Path) -> None:
    # A stand-in mvn that "resolves" two jars and records that it ran; the cache holds an older fetch.
    bin_dir, cache = tmp_path / "bin", tmp_path / "cache"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(
        '#!/bin/sh\nfor a; do case "$a" in -DoutputDirectory=*) out=${a#-DoutputDirectory=};; esac; done\n'
        'mkdir -p "$out" && touch "$out/hbase-server-9.9.9.jar" "$out/hbase-compression-aircompressor-9.9.9.jar"\n'
        f'echo ran >>{tmp_path}/mvn-runs\n')
    (bin_dir / "mvn").chmod(0o755)
    (cache / "9.9.9").mkdir(parents=True)
    (cache / "9.9.9" / "classpath.txt").write_text("/jars/hbase-server-9.9.9.jar\n")
    env = _env(HBASE_VERSION="9.9.9", HBASE_CACHE_DIR=str(cache), PATH=f"{bin_dir}:{SYSTEM_PATH}")
    result = _run(SCRIPT, "fetch", env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mvn-runs").read_text() == "ran\n"
    pom = (cache / "9.9.9" / "pom.xml").read_text()
    assert "<artifactId>hbase-compression-aircompressor</artifactId><version>9.9.9</version>" in pom
    assert (cache / "9.9.9" / "classpath.txt").read_text().split(":") == [
        f"{cache}/9.9.9/lib/hbase-compression-aircompressor-9.9.9.jar", f"{cache}/9.9.9/lib/hbase-server-9.9.9.jar\n"]
    result = _run(SCRIPT, "fetch", env)  # now complete: not fetched a third time
    assert result.stdout == f"HBase 9.9.9 already fetched: {cache}/9.9.9\n"
    assert (tmp_path / "mvn-runs").read_text() == "ran\n"


def test_clean_deletes_the_data_and_keeps_the_logs(tmp_path: pathlib.Path) -> None:
    run = tmp_path / "run"
    for sub in ("data/root/WALs", "data/root/archive", "logs"):
        (run / sub).mkdir(parents=True)
    (run / "data" / "root" / "WALs" / "wal.1").write_bytes(b"x" * 1000)
    (run / "logs" / "master.log").write_text("log\n")
    result = _run(SCRIPT, "clean", _env(HBASE_RUN_DIR=str(run)))
    assert result.returncode == 0, result.stderr
    assert not (run / "data").exists()
    assert (run / "logs" / "master.log").read_text() == "log\n"
