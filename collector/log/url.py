"""Trace-log URLs: ``file`` (the default) or ``kafka://HOST:PORT[,HOST:PORT]/TOPIC``.

::

    parse_kafka_url("kafka://k1:9092,k2:9092/traces")   # KafkaTopic(bootstrap="k1:9092,k2:9092", topic="traces")
"""

from __future__ import annotations

import re
from typing import NamedTuple

from collector.log.errors import BadLogUrlError

FILE_LOG = "file"
KAFKA_SCHEME = "kafka://"
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})")


class KafkaTopic(NamedTuple):
    """A parsed ``kafka://HOST:PORT[,HOST:PORT]/TOPIC``: the bootstrap list (comma-separated) and the topic."""

    bootstrap: str
    topic: str

    @property
    def url(self) -> str:
        return f"{KAFKA_SCHEME}{self.bootstrap}/{self.topic}"


def parse_kafka_url(url: str) -> KafkaTopic:
    """Split a Kafka log URL; :class:`BadLogUrlError` (one line naming the problem) when it is malformed."""
    if not url.startswith(KAFKA_SCHEME):
        raise BadLogUrlError(f"{url!r} is not a kafka://HOST:PORT[,HOST:PORT]/TOPIC URL")
    servers, slash, topic = url[len(KAFKA_SCHEME):].partition("/")
    if not slash or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise BadLogUrlError(f"{url}: the topic after the '/' must be 1-249 of A-Z a-z 0-9 . _ -")
    hosts = servers.split(",")
    for host in hosts:
        m = _HOST_PORT.fullmatch(host)
        if m is None or not 0 < int(m.group(2)) <= 65535:
            raise BadLogUrlError(f"{url}: {host!r} is not HOST:PORT")
    return KafkaTopic(",".join(hosts), topic)


def is_kafka_log(log_url: str) -> bool:
    """True for a ``kafka://HOST:PORT[,HOST:PORT]/TOPIC`` log URL."""
    return log_url.startswith(KAFKA_SCHEME)
