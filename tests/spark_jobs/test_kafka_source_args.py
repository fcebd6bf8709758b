"""``tracehook index --source kafka://`` arguments: refused before Spark starts, one line, exit 2."""

from __future__ import annotations

import argparse

import pytest

from spark_jobs import EXIT_USAGE, add_arguments, check_arguments, run
from spark_jobs.kafka_source import default_checkpoint


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_window_and_limits_are_parsed(tmp_path) -> None:
    args = _args("--source", "kafka://k1:9092,k2:9092/traces", "--store", f"local:{tmp_path}/i.db",
                 "--from=1700000000000", "--to=1700000060000", "--max-offsets-per-trigger", "500")
    check_arguments(args)
    assert args.kafka.bootstrap == "k1:9092,k2:9092" and args.kafka.topic == "traces"
    assert args.window == (1_700_000_000_000, 1_700_000_060_000)


@pytest.mark.parametrize(("argv", "message"), [
    (("--source", "kafka://k1/traces"), "is not HOST:PORT"),
    (("--source", "kafka://k1:9092"), "the topic after the '/'"),
    (("--source", "kafka://k1:9092/t", "--to=now"), "--to needs --from"),
    (("--source", "kafka://k1:9092/t", "--from=-1h", "--follow"), "not with --follow"),
    (("--source", "kafka://k1:9092/t", "--from=now", "--to=-1h"), "--from must be before --to"),
    (("--source", "kafka://k1:9092/t", "--max-offsets-per-trigger", "0"), "must be >= 1"),
    (("--log-dir", ".", "--from=-1h"), "need a Kafka --source"),
])
def test_bad_kafka_arguments_are_one_line_exit_2(tmp_path, capsys, argv, message) -> None:
    assert run(_args(*argv, "--store", f"local:{tmp_path}/i.db")) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_checkpoint_is_per_topic_bootstrap_and_store(monkeypatch, tmp_path) -> None:
    from collector.log.url import parse_kafka_url

    monkeypatch.setenv("TRACEHOOK_INDEX_CHECKPOINTS", str(tmp_path))
    a = parse_kafka_url("kafka://k1:9092,k2:9092/traces")
    same = default_checkpoint(parse_kafka_url("kafka://k2:9092,k1:9092/traces"), "local:/x")
    assert default_checkpoint(a, "local:/x") == same  # the bootstrap list's order does not matter
    assert default_checkpoint(a, "local:/y") != same
    assert default_checkpoint(parse_kafka_url("kafka://k1:9092/other"), "local:/x") != same
