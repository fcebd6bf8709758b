"""Collector configuration: precedence of flags, env vars and TOML; validation."""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
from fixtures.collector_process import ROOT, run_collector

from collector.cli.main import main as tracehook_main
from collector.cli.serve import add_arguments, config_from_args
from collector.server.config import ENV_PREFIX, FIELDS, KEY_ALIASES, SETTINGS, TOKENS_KEY, CollectorConfig, load_config
from collector.server.errors import CollectorConfigError

WRONG_TYPES = {  # line in the TOML file -> the key the one-line error names
    'port = "abc"': "port",
    'retention_s = "7d"': "retention_s",
    'shutdown_timeout_s = "ten"': "shutdown_timeout_s",
    "host = 127": "host",
    "store = 5": "store",
    "port = 7071.5": "port",  # once listened on 7071
    "port = true": "port",  # once listened on port 1
}
OUT_OF_RANGE = {
    "port = 0": "port",
    "port = 65536": "port",
    "segment_bytes = 0": "segment_bytes",
    "dedup_window = 1.5": "dedup_window",
    "retention_s = -1": "retention_s",
    "rate_limit_burst_s = 0": "rate_limit_burst_s",
    "segment_age_s = nan": "segment_age_s",
    "maintenance_interval_s = inf": "maintenance_interval_s",
    'durability = "sometimes"': "durability",
    'data_dir = ""': "data_dir",
}
AS_A_COMMAND = [*WRONG_TYPES, "port = 0", "segment_bytes = 0"]
"""Run as ``tracehook collector --config FILE`` (the rest go through load_config, the same check)."""


def _without_collector_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}


def _toml(directory: pathlib.Path, name: str, line: str) -> pathlib.Path:
    toml = directory / f"{name}.toml"
    data_dir = "" if line.startswith("data_dir") else f'data_dir = "{directory / "data"}"\n'
    toml.write_text(f"[collector]\n{data_dir}{line}\n")
    return toml


@pytest.fixture(scope="module")
def bad_toml_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str]]:
    """``tracehook collector --config FILE`` for each of AS_A_COMMAND, side by side: line -> (exit code, stderr)."""
    tmp = tmp_path_factory.mktemp("bad-toml")
    procs = {line: subprocess.Popen(
        [sys.executable, "-m", "collector.cli.main", "collector", "--config", str(_toml(tmp, str(n), line))],
        cwd=ROOT, env=_without_collector_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n, line in enumerate(AS_A_COMMAND)}
    runs = {}
    for line, proc in procs.items():
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # a collector that started after all: stopped, and its test fails
            proc.kill()
            _, err = proc.communicate()
        runs[line] = (proc.returncode, err)
    return runs


@pytest.mark.parametrize("line", AS_A_COMMAND)
def test_a_wrong_toml_value_stops_the_collector_with_one_line(bad_toml_runs: dict[str, tuple[int, str]],
                                                              line: str) -> None:
    code, err = bad_toml_runs[line]
    key = {**WRONG_TYPES, **OUT_OF_RANGE}[line]
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("tracehook collector: ") and f".toml: {line}: expected " in err and key in line


@pytest.mark.parametrize("line", [*WRONG_TYPES, *OUT_OF_RANGE])
def test_a_wrong_toml_value_is_named_with_what_it_should_be(tmp_path: pathlib.Path, line: str) -> None:
    toml = _toml(tmp_path, "c", line)
    key = {**WRONG_TYPES, **OUT_OF_RANGE}[line]
    expected = SETTINGS[KEY_ALIASES.get(key, key)].expected
    with pytest.raises(CollectorConfigError) as raised:
        load_config({}, env={}, config_file=str(toml))
    assert str(raised.value) == f"{toml}: {line}: expected {expected}"


def test_every_field_has_its_setting() -> None:
    # tokens, an array of tables, is checked by collector.server.tokens (tests/collector/server/test_tokens.py)
    assert set(SETTINGS) | {TOKENS_KEY} == set(FIELDS)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_every_field_refuses_a_value_of_the_wrong_type(tmp_path: pathlib.Path, name: str) -> None:
    wrong = "5" if SETTINGS[name].kind is str else '"5"'
    toml = tmp_path / "c.toml"
    toml.write_text(f"{name} = {wrong}\n")
    with pytest.raises(CollectorConfigError, match=f"^{toml}: {name} = "):
        load_config({}, env={}, config_file=str(toml))


@pytest.mark.parametrize(("name", "value", "expected"), [
    ("port", 1, 1), ("port", 65535, 65535), ("retention_s", 0, 0.0), ("shutdown_timeout_s", 2.5, 2.5),
    ("backlog_limit_bytes", 0, 0), ("durability", "os", "os"), ("segment_age_s", 1, 1.0),
])
def test_values_at_the_ends_of_their_ranges_are_taken(name: str, value: Any, expected: Any) -> None:
    got = getattr(CollectorConfig(data_dir="d", **{name: value}), name)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(("var", "raw"), [
    ("PORT", "0"), ("PORT", "70000"), ("PORT", "7071.5"), ("PORT", "abc"), ("RETENTION_S", "-1"),
    ("RETENTION_S", "inf"), ("SEGMENT_BYTES", "1.5"), ("DURABILITY", "sometimes"), ("HOST", ""),
])
def test_a_bad_env_value_is_logged_and_the_file_value_kept(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture,
                                                           var: str, raw: str) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('port = 7001\nretention_s = 60\nsegment_bytes = 4096\ndurability = "os"\nhost = "::1"\n')
    expected = load_config({}, env={}, config_file=str(toml))
    assert load_config({}, env={ENV_PREFIX + var: raw}, config_file=str(toml)) == expected
    assert f"ignoring {ENV_PREFIX + var}" in caplog.text and "expected" in caplog.text


@pytest.mark.parametrize(("flag", "expected"), [
    ("--port=0", "argument --port: expected an integer from 1 to 65535, not '0'"),
    ("--port=7071.5", "argument --port: expected an integer from 1 to 65535, not '7071.5'"),
    ("--retention=-1", "argument --retention: expected a number >= 0, not '-1'"),
    ("--durability=sometimes", "argument --durability: expected one of fsync, os, not 'sometimes'"),
])
def test_a_bad_flag_is_one_line(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], flag: str,
                                expected: str) -> None:
    with pytest.raises(SystemExit) as exited:
        tracehook_main(["collector", "--data-dir", str(tmp_path), flag])
    assert (exited.value.code, capsys.readouterr().err) == (
        2, f"tracehook collector: error: {expected} (see tracehook collector --help)\n")


def test_the_placeholder_token_from_the_env_file_stops_the_collector(tmp_path: pathlib.Path) -> None:
    env = {**_without_collector_env(), "TRACEHOOK_COLLECTOR_INGEST_TOKEN": "change-me-ingest-token",
           "TRACEHOOK_COLLECTOR_QUERY_TOKEN": "q-s3cret"}
    done = subprocess.run([sys.executable, "-m", "collector.cli.main", "collector", "--data-dir", str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith("tracehook collector: ingest_token from TRACEHOOK_COLLECTOR_INGEST_TOKEN ")
    assert "/etc/tracehook/tracehook.env" in done.stderr and "change-me-ingest-token" not in done.stderr


def test_a_placeholder_token_is_refused_from_the_file_and_the_command_line(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('query_token = "change-me-query-token"\n')
    with pytest.raises(CollectorConfigError, match=f"^query_token from {toml} is still the example's placeholder"):
        load_config({}, env={}, config_file=str(toml))
    with pytest.raises(CollectorConfigError, match="^ingest_token from the command line "):
        load_config({"ingest_token": "change-me"}, env={})
    # a real token given on the command line wins over the placeholder: only the value in use counts
    assert load_config({"query_token": "q-s3cret"}, env={}, config_file=str(toml)).query_token == "q-s3cret"


def test_a_kafka_log_takes_batches_up_to_what_librdkafka_allows() -> None:
    with pytest.raises(CollectorConfigError, match="^max_body_bytes = 2000000000: a Kafka log takes records"):
        CollectorConfig(data_dir="d", log_url="kafka://k1:9092/traces", max_body_bytes=2_000_000_000)
    assert CollectorConfig(data_dir="d", max_body_bytes=2_000_000_000).max_body_bytes == 2_000_000_000


def test_flags_override_env_which_overrides_toml(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('data_dir = "from-toml"\nport = 7001\nretention_s = 60\n')
    env = {"TRACEHOOK_COLLECTOR_PORT": "7002", "TRACEHOOK_COLLECTOR_INGEST_TOKEN": "tok"}
    cfg = load_config({"port": 7003, "host": None}, env=env, config_file=str(toml))
    assert (cfg.port, cfg.data_dir, cfg.retention_s, cfg.ingest_token, cfg.host) == (
        7003, "from-toml", 60.0, "tok", "127.0.0.1")
    assert load_config({}, env=env, config_file=str(toml)).port == 7002
    assert load_config({}, env={}, config_file=str(toml)).port == 7001


def test_config_file_from_env_and_collector_table(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('[collector]\ndurability = "os"\n')
    cfg = load_config({}, env={"TRACEHOOK_COLLECTOR_CONFIG": str(toml)})
    assert cfg.durability == "os"


def test_bad_env_value_is_ignored_but_bad_explicit_value_raises(caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_config({}, env={"TRACEHOOK_COLLECTOR_PORT": "not-a-port"})
    assert cfg.port == 7070
    assert "TRACEHOOK_COLLECTOR_PORT" in caplog.text
    with pytest.raises(CollectorConfigError):
        load_config({"durability": "sometimes"}, env={})
    with pytest.raises(CollectorConfigError):
        load_config({"nonsense": 1}, env={})


def test_unknown_toml_key_is_an_error(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text("prot = 1\n")
    with pytest.raises(CollectorConfigError, match="prot"):
        load_config({}, env={}, config_file=str(toml))


def test_defaults_and_derived_paths() -> None:
    cfg = CollectorConfig(data_dir="/srv/th")
    assert cfg.log_dir == "/srv/th/log"
    assert cfg.store_url == "local:/srv/th/index.sqlite3"
    assert CollectorConfig(data_dir="/srv/th", ingest_token="").ingest_token is None
    assert not CollectorConfig(data_dir="d", store_url="none").store_enabled
    with pytest.raises(CollectorConfigError):
        CollectorConfig(data_dir="d", ingest_token="same", query_token="same")
    with pytest.raises(CollectorConfigError):
        CollectorConfig(data_dir="d", segment_bytes=0)


def test_store_is_the_key_everywhere_and_store_url_an_alias(tmp_path: pathlib.Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    for flag in ("--store", "--store-url"):
        args = parser.parse_args(["--data-dir", str(tmp_path), flag, "hbase://h:9090?namespace=t"])
        assert config_from_args(args).store_url == "hbase://h:9090?namespace=t"
    for key in ("store", "store_url"):
        toml = tmp_path / f"{key}.toml"
        toml.write_text(f'[collector]\n{key} = "local:/x.sqlite3"\n')
        assert load_config({}, env={}, config_file=str(toml)).store_url == "local:/x.sqlite3"
    both = tmp_path / "both.toml"
    both.write_text('store = "local:/a"\nstore_url = "local:/b"\n')
    with pytest.raises(CollectorConfigError, match="store and store_url are the same setting"):
        load_config({}, env={}, config_file=str(both))
    assert load_config({}, env={"TRACEHOOK_COLLECTOR_STORE": "none"}).store_url == "none"
    assert load_config({}, env={"TRACEHOOK_COLLECTOR_STORE_URL": "none"}).store_url == "none"


def test_bad_store_url_stops_the_collector_with_one_line(tmp_path: pathlib.Path) -> None:
    done = run_collector(str(tmp_path), store="hbase://h:9090?nmespace=t")
    assert done.returncode == 2
    assert done.stderr == "tracehook collector: store: unknown store option(s): nmespace\n"
