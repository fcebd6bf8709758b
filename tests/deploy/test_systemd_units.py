"""deploy/systemd: the units pass ``systemd-analyze verify`` with their install path present, and
their command lines, TOML config and environment file are ones the commands accept.

``systemd-analyze --root`` checks the units inside a temporary root that holds systemd's own
units (copied from this machine) and the install tree the units name (``/opt/tracehook/venv``).
"""

from __future__ import annotations

import argparse
import configparser
import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest
from fixtures import systemd_units

from collector.cli import serve
from collector.server.config import ENV_PREFIX, FIELDS, KEY_ALIASES, load_config
from collector.server.errors import CollectorConfigError
from spark_jobs import index_job

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNITS_DIR = ROOT / "deploy" / "systemd"
UNITS = ("tracehook-collector.service", "tracehook-index.service")
SYSTEMD_ANALYZE = "/usr/bin/systemd-analyze"
SYSTEM_UNITS = "/usr/lib/systemd/system"
DATA_DIR = "/var/lib/tracehook"
EXPOSURE_OK = 3.0
"""The highest overall exposure ``systemd-analyze security`` still rates "OK"."""


def _unit(name: str) -> configparser.ConfigParser:
    return systemd_units.read_unit(UNITS_DIR / name)


def _service(name: str) -> Any:
    return systemd_units.service(UNITS_DIR / name)


def _env_file() -> dict[str, str]:
    return systemd_units.read_env_file(UNITS_DIR / "tracehook.env")


def _unit_environment(name: str) -> dict[str, str]:
    """The service's environment as systemd builds it: Environment= lines, then the file over them."""
    return systemd_units.unit_environment(UNITS_DIR / name, UNITS_DIR / "tracehook.env")


def _exec_argv(name: str) -> list[str]:
    """ExecStart= expanded as systemd does: ``$VAR`` split into words, ``${VAR}`` one word."""
    return systemd_units.exec_argv(UNITS_DIR / name, _unit_environment(name))


@pytest.fixture
def fake_root(tmp_path: Any) -> pathlib.Path:
    """A root with systemd's units, the units under test and the install path they name."""
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.lstrip("/"), symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for name in UNITS:
        shutil.copy(UNITS_DIR / name, root / "etc/systemd/system" / name)
    binary = root / _exec_argv(UNITS[0])[0].lstrip("/")
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return root


def _verify(root: pathlib.Path, name: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SYSTEMD_ANALYZE, f"--root={root}", "verify", name],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_verify_passes_with_the_install_path_present(fake_root: pathlib.Path, name: str) -> None:
    done = _verify(fake_root, name)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


@pytest.mark.parametrize("name", UNITS)
def test_systemd_analyze_security_rates_the_sandbox_ok(fake_root: pathlib.Path, name: str) -> None:
    done = subprocess.run([SYSTEMD_ANALYZE, f"--root={fake_root}", "security", "--offline=true", "--no-pager", name],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    level = re.search(rf"Overall exposure level for {re.escape(name)}: (\d+\.\d+) (\w+)", done.stdout)
    assert level is not None, done.stdout
    assert (float(level.group(1)) <= EXPOSURE_OK, level.group(2)) == (True, "OK"), done.stdout


def test_systemd_analyze_verify_fails_without_the_install_path(fake_root: pathlib.Path) -> None:
    shutil.rmtree(fake_root / "opt")
    done = _verify(fake_root, UNITS[0])
    assert done.returncode != 0 and "/opt/tracehook/venv/bin/tracehook" in done.stderr


@pytest.mark.parametrize("name", UNITS)
def test_units_run_sandboxed_as_a_dedicated_user(name: str) -> None:
    service = _service(name)
    assert service["User"] == service["Group"] == "tracehook"
    assert (service["NoNewPrivileges"], service["ProtectSystem"], service["PrivateTmp"], service["ProtectHome"]) == (
        "yes", "strict", "yes", "yes")
    assert service["ReadWritePaths"] == DATA_DIR == service["WorkingDirectory"]
    assert service["Restart"] == "on-failure"
    assert "2" in service["RestartPreventExitStatus"].split()  # a bad config is not retried forever
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["CapabilityBoundingSet"] == "" and service["SystemCallFilter"] == "@system-service"
    assert service["RestrictAddressFamilies"].split() == ["AF_UNIX", "AF_INET", "AF_INET6"]
    assert "MemoryDenyWriteExecute" not in service  # Spark's JVM (the index job, the collector's --index) JITs
    assert _exec_argv(name)[0] == "/opt/tracehook/venv/bin/tracehook"


def test_the_collector_unit_notifies_and_outlasts_its_drain() -> None:
    service = _service(UNITS[0])
    assert service["Type"] == "notify"
    config = load_config(env={}, config_file=str(UNITS_DIR / "collector.toml"))
    assert int(service["TimeoutStopSec"]) > config.shutdown_timeout_s
    assert config.data_dir == DATA_DIR


def test_the_index_unit_stops_the_job_alone() -> None:
    # SIGTERM to the job only: it stops its query and JVM itself (exit 0); the rest then gets SIGKILL.
    assert _service(UNITS[1])["KillMode"] == "mixed"


def test_the_collector_command_line_config_and_env_file_are_accepted() -> None:
    argv = _exec_argv(UNITS[0])
    assert argv[1] == "collector"
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(argv[2:])
    assert args.log_format == "json" and args.config == "/etc/tracehook/collector.toml"
    env = _env_file()
    collector_keys = {k.removeprefix(ENV_PREFIX).lower() for k in env if k.startswith(ENV_PREFIX)}
    assert collector_keys and collector_keys <= set(FIELDS) | set(KEY_ALIASES)
    with pytest.raises(CollectorConfigError, match="/etc/tracehook/tracehook.env"):  # its placeholders are refused
        load_config(env=env, config_file=str(UNITS_DIR / "collector.toml"))
    own = {**env, "TRACEHOOK_COLLECTOR_INGEST_TOKEN": "i-s3cret", "TRACEHOOK_COLLECTOR_QUERY_TOKEN": "q-s3cret"}
    config = load_config(env=own, config_file=str(UNITS_DIR / "collector.toml"))
    assert (config.ingest_token, config.query_token) == ("i-s3cret", "q-s3cret")


@pytest.mark.parametrize("source", ["file", "kafka"])
def test_the_index_command_line_is_accepted_for_both_sources(source: str) -> None:
    argv = _exec_argv(UNITS[1])
    if source == "kafka":  # the env file's commented alternative
        line = next(x for x in (UNITS_DIR / "tracehook.env").read_text().splitlines()
                    if x.startswith("#TRACEHOOK_INDEX_SOURCE=--source"))
        at = argv.index("--log-dir")
        argv[at:at + 2] = line.partition("=")[2].split()
    assert argv[1] == "index"
    parser = argparse.ArgumentParser()
    index_job.add_arguments(parser)
    args = parser.parse_args(argv[2:])
    assert args.follow and args.log_format == "json" and args.store == f"local:{DATA_DIR}/index.sqlite3"
    if source == "file":
        assert args.log_dir == f"{DATA_DIR}/log"
    else:
        assert args.source.startswith("kafka://") and args.log_dir is None
    env = _unit_environment(UNITS[1])
    assert env["TRACEHOOK_INDEX_CHECKPOINTS"].startswith(DATA_DIR + "/")  # writable under ProtectSystem=strict

