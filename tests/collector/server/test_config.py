"""Collector configuration: precedence of flags, env vars and TOML; validation."""

from __future__ import annotations

import argparse
import pathlib

import pytest
from fixtures.collector_process import run_collector

from collector.cli.serve import add_arguments, config_from_args
from collector.server.config import CollectorConfig, load_config
from collector.server.errors import CollectorConfigError


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
