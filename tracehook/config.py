"""Tracer configuration: one frozen dataclass, filled from arguments or environment variables.

Explicit arguments win over the environment.  A bad explicit argument raises
:class:`~tracehook.errors.ConfigError`; a bad environment value is logged and
the default used instead (a typo in a deployment must not stop the app).

Environment variables (all optional):

=============================  ===============================================  ==========
variable                       meaning                                          default
=============================  ===============================================  ==========
TRACEHOOK_COLLECTORS           comma-separated collector base URLs              (none: off)
TRACEHOOK_TOKEN                ingest bearer token                              (none)
TRACEHOOK_CA_FILE              PEM CA bundle that https:// collectors are       system CAs
                               verified against (instead of the system CAs)
TRACEHOOK_APP                  application name put on every batch              script name
TRACEHOOK_QUEUE_SIZE           events held before new ones are dropped          100000
TRACEHOOK_BATCH_EVENTS         most events per batch                            5000
TRACEHOOK_BATCH_BYTES          most encoded bytes per batch                     1048576
TRACEHOOK_LINGER_MS            how long events wait for a batch to fill         200
TRACEHOOK_TIMEOUT_MS           HTTP connect/read timeout per request            5000
TRACEHOOK_MAX_RETRIES          retries of one batch before it is dropped        8
TRACEHOOK_BACKOFF_MS           first retry delay (doubles, full jitter)         200
TRACEHOOK_MAX_BACKOFF_MS       longest retry delay                              10000
TRACEHOOK_FAILOVER_MS          how long a failing collector is set aside        30000
TRACEHOOK_EXIT_TIMEOUT_MS      how long the exit flush may take                 5000
TRACEHOOK_BODY_TOPICS          comma-separated topics whose bodies are kept     (none)
TRACEHOOK_CAPTURE_BODY         keep the bodies of every topic (1/true, 0/false) false
TRACEHOOK_MAX_BODY_BYTES       longest body kept (after redaction)              1024
TRACEHOOK_CAPTURE_PROPS        comma-separated header / AMQP property names     (none)
                               the adapters record as props
TRACEHOOK_TRACE_SAMPLE_RATIO   share of traces tracehook starts whose           1.0
                               ``traceparent`` says "sampled" (0.0 .. 1.0)
=============================  ===============================================  ==========
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from . import wire
from .context import DEFAULT_SAMPLE_RATIO
from .errors import ConfigError

log = logging.getLogger("tracehook")

DEFAULT_QUEUE_SIZE = 100_000
DEFAULT_BATCH_EVENTS = 5_000
DEFAULT_BATCH_BYTES = 1024 * 1024
DEFAULT_LINGER_S = 0.2
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_MAX_RETRIES = 8
DEFAULT_BACKOFF_S = 0.2
DEFAULT_MAX_BACKOFF_S = 10.0
DEFAULT_FAILOVER_S = 30.0
DEFAULT_EXIT_TIMEOUT_S = 5.0
DEFAULT_MAX_BODY_BYTES = 1024
DEFAULT_TRACE_SAMPLE_RATIO = DEFAULT_SAMPLE_RATIO  # see TracerConfig.trace_sample_ratio
BATCHES_PATH = "/v1/batches"

ENV_COLLECTORS = "TRACEHOOK_COLLECTORS"
ENV_TOKEN = "TRACEHOOK_TOKEN"
ENV_APP = "TRACEHOOK_APP"
# field name -> (environment variable, parser); times are given in ms in the environment
_ENV_NUMBERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "queue_size": ("TRACEHOOK_QUEUE_SIZE", int),
    "batch_events": ("TRACEHOOK_BATCH_EVENTS", int),
    "batch_bytes": ("TRACEHOOK_BATCH_BYTES", int),
    "linger_s": ("TRACEHOOK_LINGER_MS", lambda v: float(v) / 1000),
    "timeout_s": ("TRACEHOOK_TIMEOUT_MS", lambda v: float(v) / 1000),
    "max_retries": ("TRACEHOOK_MAX_RETRIES", int),
    "backoff_s": ("TRACEHOOK_BACKOFF_MS", lambda v: float(v) / 1000),
    "max_backoff_s": ("TRACEHOOK_MAX_BACKOFF_MS", lambda v: float(v) / 1000),
    "failover_s": ("TRACEHOOK_FAILOVER_MS", lambda v: float(v) / 1000),
    "exit_timeout_s": ("TRACEHOOK_EXIT_TIMEOUT_MS", lambda v: float(v) / 1000),
    "capture_body": ("TRACEHOOK_CAPTURE_BODY", lambda v: {"1": True, "true": True, "0": False, "false": False}[v.lower()]),
    "max_body_bytes": ("TRACEHOOK_MAX_BODY_BYTES", int),
    "trace_sample_ratio": ("TRACEHOOK_TRACE_SAMPLE_RATIO", float),
    "body_topics": ("TRACEHOOK_BODY_TOPICS", lambda v: _split_names(v)),
    "capture_props": ("TRACEHOOK_CAPTURE_PROPS", lambda v: _split_names(v)),
    "ca_file": ("TRACEHOOK_CA_FILE", str),  # a missing or bad file is logged, and the system CAs used
}


def _default_app() -> str:
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name.removesuffix(".py") or "python"


@dataclass(frozen=True)
class TracerConfig:
    """Everything a :class:`~tracehook.Tracer` needs; build it with :meth:`from_env` to read the environment."""

    app: str = "python"
    collectors: tuple[str, ...] = ()
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    """PEM CA bundle to verify https:// collectors with, instead of the system CAs (e.g. a private CA)."""
    host: str = ""
    queue_size: int = DEFAULT_QUEUE_SIZE
    batch_events: int = DEFAULT_BATCH_EVENTS
    batch_bytes: int = DEFAULT_BATCH_BYTES
    linger_s: float = DEFAULT_LINGER_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    failover_s: float = DEFAULT_FAILOVER_S
    exit_timeout_s: float = DEFAULT_EXIT_TIMEOUT_S
    flush_at_exit: bool = True
    body_topics: frozenset[str] | Callable[[str], bool] = frozenset()
    """The topics whose bodies sends keep (record_send(body=...), the adapters), or a callable(topic) -> bool.
    Empty by default: bodies may hold personal data."""
    capture_body: bool = False
    """Keep the bodies of every topic (the switch before body_topics; prefer naming the topics)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Longest body kept, 0..64 KiB: a longer one keeps its first bytes and is marked truncated."""
    redact_body: Callable[[bytes], bytes | None] | None = None
    """Called on each captured body before it is cut to max_body_bytes; return None to keep nothing."""
    capture_props: frozenset[str] = frozenset()
    """Record headers (Kafka, the AMQP ``headers`` table) and AMQP properties (``amqp.<property>``, e.g.
    ``amqp.correlation_id``) the adapters record as props, by name: nothing else is recorded."""
    trace_sample_ratio: float = DEFAULT_TRACE_SAMPLE_RATIO
    """The sampled flag of traces tracehook starts (no active OpenTelemetry span): set when the low 64 bits
    of the trace id fall below ratio * 2**64, OpenTelemetry's TraceIdRatioBased rule.  tracehook records
    every message whatever the flag; it only tells parent-based OpenTelemetry consumers whether to record
    their spans.  1.0 (the default) keeps them joined to every message trace, as tracehook did record the
    send; lower it when OpenTelemetry consumers should sample, at the ratio their own samplers use."""

    def __post_init__(self) -> None:
        if isinstance(self.collectors, str):
            object.__setattr__(self, "collectors", _split_urls(self.collectors))
        else:
            object.__setattr__(self, "collectors", tuple(self.collectors))
        for url in self.collectors:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"collectors: {url!r} is not an http(s) URL")
        if not self.host:
            object.__setattr__(self, "host", socket.gethostname())
        if self.ca_file == "":
            object.__setattr__(self, "ca_file", None)
        if self.ca_file is not None:
            try:  # load it now: a bad bundle must fail here, not later in the background thread
                ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                raise ConfigError(f"ca_file: cannot load {self.ca_file!r}: {exc}") from None
        _set_names(self, "body_topics", callable_ok=True)
        _set_names(self, "capture_props")
        reserved = self.capture_props & RESERVED_PROPS
        if reserved:
            raise ConfigError(f"capture_props: {', '.join(sorted(reserved))} are recorded by tracehook itself")
        if not 0 <= self.max_body_bytes <= wire.MAX_BODY_LEN:
            raise ConfigError(f"max_body_bytes must be within 0..{wire.MAX_BODY_LEN}, got {self.max_body_bytes!r}")
        if not 0.0 <= self.trace_sample_ratio <= 1.0:  # also rejects NaN
            raise ConfigError(f"trace_sample_ratio must be within 0.0..1.0, got {self.trace_sample_ratio!r}")
        for name in ("queue_size", "batch_events", "batch_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries!r}")
        for name in ("linger_s", "timeout_s", "backoff_s", "max_backoff_s", "failover_s", "exit_timeout_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)!r}")

    @property
    def enabled(self) -> bool:
        """Whether events go anywhere (at least one collector is configured)."""
        return bool(self.collectors)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> TracerConfig:
        """Defaults, then environment variables, then ``overrides`` (None overrides are ignored)."""
        env = os.environ if env is None else env
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {"app": env.get(ENV_APP) or _default_app()}
        if env.get(ENV_COLLECTORS):
            values["collectors"] = _split_urls(env[ENV_COLLECTORS])
        if env.get(ENV_TOKEN):
            values["token"] = env[ENV_TOKEN]
        for name, (var, parse) in _ENV_NUMBERS.items():
            if env.get(var):
                try:
                    values[name] = parse(env[var])
                    replace(cls(), **{name: values[name]})  # validate this one value
                except (ValueError, KeyError, ConfigError) as exc:
                    log.warning("tracehook: ignoring %s=%r (%s); using the default", var, env[var], exc)
                    values.pop(name, None)
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from None


RESERVED_PROPS = frozenset({"amqp.exchange", "amqp.routing_key", "replay.target", "replay.run"})
"""Props the adapters and hooks record themselves: no app setting may name them."""


def _set_names(config: TracerConfig, name: str, callable_ok: bool = False) -> None:
    """Make a field a frozenset of non-empty names (a str is comma-separated); a callable stays one where allowed."""
    value = getattr(config, name)
    if callable_ok and callable(value):
        return
    if value is None:
        value = ()
    if isinstance(value, str):
        value = _split_names(value)
    try:
        names = frozenset(value)
    except TypeError:
        raise ConfigError(f"{name}: a collection of names{' or a callable' if callable_ok else ''}, "
                          f"not {type(value).__name__}") from None
    if not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{name}: every name must be a non-empty string")
    object.__setattr__(config, name, names)


def _split_names(text: str) -> frozenset[str]:
    return frozenset(n.strip() for n in text.split(",") if n.strip())


def _split_urls(text: str) -> tuple[str, ...]:
    return tuple(u.strip().rstrip("/") for u in text.split(",") if u.strip())
