"""Configuration from arguments and environment variables."""

from __future__ import annotations

import logging

import pytest

from tracehook import ConfigError, TracerConfig


def test_environment_values():
    config = TracerConfig.from_env({
        "TRACEHOOK_COLLECTORS": "http://a:1, http://b:2/",
        "TRACEHOOK_TOKEN": "t",
        "TRACEHOOK_APP": "shop",
        "TRACEHOOK_QUEUE_SIZE": "10",
        "TRACEHOOK_LINGER_MS": "50",
    })
    assert config.collectors == ("http://a:1", "http://b:2")
    assert (config.token, config.app, config.queue_size, config.linger_s) == ("t", "shop", 10, 0.05)
    assert config.enabled


def test_arguments_win_over_the_environment():
    config = TracerConfig.from_env({"TRACEHOOK_APP": "env", "TRACEHOOK_QUEUE_SIZE": "10"}, app="arg", queue_size=5)
    assert (config.app, config.queue_size) == ("arg", 5)


def test_bad_environment_values_are_logged_and_defaulted(caplog):
    with caplog.at_level(logging.WARNING, logger="tracehook"):
        config = TracerConfig.from_env({"TRACEHOOK_QUEUE_SIZE": "lots", "TRACEHOOK_BATCH_EVENTS": "-3",
                                        "TRACEHOOK_CAPTURE_BODY": "maybe"})
    assert config.queue_size == TracerConfig().queue_size and config.batch_events == TracerConfig().batch_events
    assert not config.capture_body
    for var in ("TRACEHOOK_QUEUE_SIZE", "TRACEHOOK_BATCH_EVENTS", "TRACEHOOK_CAPTURE_BODY"):
        assert var in caplog.text


@pytest.mark.parametrize("bad", [dict(queue_size=0), dict(collectors=["ftp://x"]), dict(linger_s=-1), dict(max_body_bytes=10**9),
                                 dict(no_such_option=1)])
def test_bad_arguments_raise(bad):
    with pytest.raises(ConfigError):
        TracerConfig.from_env({}, **bad)


def test_without_collectors_it_is_disabled():
    assert not TracerConfig.from_env({}).enabled
