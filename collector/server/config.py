"""Collector configuration: one frozen dataclass, loaded from flags, env vars and a TOML file.

Precedence, highest first: explicit values (command-line flags), environment variables
``TRACEHOOK_COLLECTOR_<FIELD>`` (e.g. ``TRACEHOOK_COLLECTOR_INGEST_TOKEN``), the TOML file
(``--config`` or ``TRACEHOOK_COLLECTOR_CONFIG``; keys are the field names, at the top level
or under ``[collector]``), then the ``DEFAULT_*`` constants.  The store URL's key is ``store``
(``TRACEHOOK_COLLECTOR_STORE``, like ``--store``); ``store_url`` is kept as an alias::

    from collector.server.config import CollectorConfig, load_config
    cfg = CollectorConfig(data_dir="/var/lib/tracehook", port=7070, ingest_token="s3cret")
    cfg = load_config({"port": 7071})   # env + TOML + defaults filled in
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collector.log.file import DEFAULT_SEGMENT_AGE_S, DEFAULT_SEGMENT_BYTES, DURABILITY_MODES
from collector.server.errors import CollectorConfigError

log = logging.getLogger(__name__)

ENV_PREFIX = "TRACEHOOK_COLLECTOR_"
ENV_CONFIG_FILE = ENV_PREFIX + "CONFIG"
DEFAULT_DATA_DIR = "./data"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7070
DEFAULT_DURABILITY = "fsync"
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_BACKLOG_LIMIT_BYTES = 8 * 1024**3
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
DEFAULT_DEDUP_WINDOW = 100_000
DEFAULT_MAINTENANCE_INTERVAL_S = 1.0
DEFAULT_RETRY_AFTER_S = 5
DEFAULT_SHUTDOWN_TIMEOUT_S = 10.0
DEFAULT_RATE_LIMIT_BURST_S = 2.0
KEY_ALIASES = {"store": "store_url"}
"""Names a TOML key or env var may use for a field (``store``, as the ``--store`` flag of every command)."""
STORE_DISABLED = "none"
"""``store_url`` value for an ingest-only collector that opens no index store."""


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector needs; ``store_url`` defaults to ``local:<data_dir>/index.sqlite3``."""

    data_dir: str = DEFAULT_DATA_DIR
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ingest_token: str | None = field(default=None, repr=False)  # None: ingest is open
    query_token: str | None = field(default=None, repr=False)  # None: queries are open
    store_url: str = ""
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_age_s: float = DEFAULT_SEGMENT_AGE_S
    durability: str = DEFAULT_DURABILITY  # "fsync": fsync per commit group; "os": page cache only
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    backlog_limit_bytes: int = DEFAULT_BACKLOG_LIMIT_BYTES  # 0: no limit
    retention_s: float = DEFAULT_RETENTION_S
    dedup_window: int = DEFAULT_DEDUP_WINDOW  # recent (client_id, seq) pairs remembered
    maintenance_interval_s: float = DEFAULT_MAINTENANCE_INTERVAL_S
    retry_after_s: int = DEFAULT_RETRY_AFTER_S
    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    tls_cert: str | None = None  # PEM certificate chain; with tls_key the collector serves HTTPS
    tls_key: str | None = None  # PEM private key (unencrypted)
    rate_limit_events_s: float = 0.0  # per client id; 0: unlimited
    rate_limit_batches_s: float = 0.0  # per client id; 0: unlimited
    rate_limit_burst_s: float = DEFAULT_RATE_LIMIT_BURST_S  # a client may save up this many seconds of its rate
    otlp_token_header: str = ""  # POST /v1/traces also takes the ingest token from this header; "": Authorization only

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise CollectorConfigError("data_dir is required")
        if not 0 <= self.port <= 65535:
            raise CollectorConfigError(f"port must be 0..65535, not {self.port}")
        if self.durability not in DURABILITY_MODES:
            raise CollectorConfigError(f"durability must be one of {DURABILITY_MODES}, not {self.durability!r}")
        for name in ("segment_bytes", "max_body_bytes", "dedup_window", "retry_after_s"):
            if getattr(self, name) <= 0:
                raise CollectorConfigError(f"{name} must be positive")
        for name in ("segment_age_s", "maintenance_interval_s", "rate_limit_burst_s"):
            if getattr(self, name) <= 0:
                raise CollectorConfigError(f"{name} must be positive")
        for name in ("backlog_limit_bytes", "retention_s", "shutdown_timeout_s",
                     "rate_limit_events_s", "rate_limit_batches_s"):
            if getattr(self, name) < 0:
                raise CollectorConfigError(f"{name} must not be negative")
        for name in ("ingest_token", "query_token", "tls_cert", "tls_key"):
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise CollectorConfigError("tls_cert and tls_key must be given together (or neither, for plain HTTP)")
        if self.ingest_token is not None and self.ingest_token == self.query_token:
            raise CollectorConfigError("ingest_token and query_token must differ")
        if not self.store_url:
            object.__setattr__(self, "store_url", f"local:{os.path.join(self.data_dir, 'index.sqlite3')}")

    @property
    def log_dir(self) -> str:
        """The trace log directory (what ``tracehook index --log-dir`` reads)."""
        return os.path.join(self.data_dir, "log")

    @property
    def store_enabled(self) -> bool:
        """False for an ingest-only collector (``store_url = "none"``)."""
        return self.store_url != STORE_DISABLED


FIELDS = {f.name: f for f in dataclasses.fields(CollectorConfig)}


def env_name(field: str) -> str:
    """The environment variable for a config field."""
    return ENV_PREFIX + field.upper()


def _convert(name: str, value: Any) -> Any:
    kind = FIELDS[name].type
    if isinstance(value, str) and kind in ("int", "float"):
        return int(value) if kind == "int" else float(value)
    if kind == "int" and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    names = [(name, name) for name in FIELDS] + list(KEY_ALIASES.items())  # aliases last: they win
    for key, name in names:
        raw = env.get(env_name(key))
        if raw is None:
            continue
        try:
            values[name] = _convert(name, raw)
        except ValueError:
            # As OpenTelemetry does: a bad env value is logged and the default kept.
            log.warning("ignoring %s=%r: not a valid %s", env_name(key), raw, FIELDS[name].type)
    return values


def _from_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CollectorConfigError(f"cannot read config file {path}: {exc}") from exc
    doc = doc.get("collector", doc)
    unknown = set(doc) - set(FIELDS) - set(KEY_ALIASES)
    if unknown:
        raise CollectorConfigError(f"{path}: unknown keys {sorted(unknown)}")
    values: dict[str, Any] = {}
    for key, value in doc.items():
        name = KEY_ALIASES.get(key, key)
        if name in values:
            same = sorted(k for k in doc if KEY_ALIASES.get(k, k) == name)
            raise CollectorConfigError(f"{path}: {' and '.join(same)} are the same setting; give one of them")
        values[name] = _convert(name, value)
    return values


def load_config(
    explicit: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> CollectorConfig:
    """Build a config from explicit values, env vars, a TOML file and defaults (in that order)."""
    env = os.environ if env is None else env
    explicit = {k: v for k, v in (explicit or {}).items() if v is not None}
    unknown = set(explicit) - set(FIELDS)
    if unknown:
        raise CollectorConfigError(f"unknown config fields {sorted(unknown)}")
    config_file = config_file or env.get(ENV_CONFIG_FILE)
    values: dict[str, Any] = _from_toml(config_file) if config_file else {}
    values.update(_from_env(env))
    values.update({k: _convert(k, v) for k, v in explicit.items()})
    try:
        return CollectorConfig(**values)
    except TypeError as exc:
        raise CollectorConfigError(str(exc)) from exc
