"""Collector configuration: one frozen dataclass, loaded from flags, env vars and a TOML file.

Precedence, highest first: explicit values (command-line flags), environment variables
``TRACEHOOK_COLLECTOR_<FIELD>`` (e.g. ``TRACEHOOK_COLLECTOR_INGEST_TOKEN``), the TOML file
(``--config`` or ``TRACEHOOK_COLLECTOR_CONFIG``; keys are the field names, at the top level
or under ``[collector]``), then the ``DEFAULT_*`` constants.  The store URL's key is ``store``
(``TRACEHOOK_COLLECTOR_STORE``, like ``--store``); ``store_url`` is kept as an alias.  Likewise the
trace log's key is ``log`` (``--log``, ``TRACEHOOK_COLLECTOR_LOG``): ``file`` (the default) or
``kafka://HOST:PORT[,HOST:PORT]/TOPIC``.

What each field accepts (type, range, values) is written once, in :data:`SETTINGS`: a wrong TOML
value or flag stops the collector (:class:`CollectorConfigError`, one line naming the key, the
value and what it takes); a wrong environment value is logged and ignored, as OpenTelemetry
does.  :func:`load_config` refuses a token that still starts with ``change-me``
(deploy/systemd/tracehook.env's placeholders) wherever it comes from.

Named tokens with scopes (:mod:`collector.server.tokens`) come from ``[[tokens]]`` in the TOML
file (top level or ``[[collector.tokens]]``), from ``tokens_file``, or in code as ``tokens=``;
``ingest_token`` and ``query_token`` join them as the tokens named ``ingest`` and ``query``, and
:attr:`CollectorConfig.access` holds them all::

    from collector.server.config import CollectorConfig, load_config
    cfg = CollectorConfig(data_dir="/var/lib/tracehook", port=7070, ingest_token="s3cret")
    cfg = load_config({"port": 7071})   # env + TOML + defaults filled in
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collector.log.file import DEFAULT_SEGMENT_AGE_S, DEFAULT_SEGMENT_BYTES, DURABILITY_MODES
from collector.server.errors import CollectorConfigError
from collector.server.tokens import TOKEN_PLACEHOLDER, Token, TokenTable, build_table, parse_entries, read_tokens_file

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
KEY_ALIASES = {"store": "store_url", "log": "log_url"}
"""Names a TOML key or env var may use for a field (``store`` and ``log``, as the ``--store`` and ``--log`` flags)."""
STORE_DISABLED = "none"
"""``store_url`` value for an ingest-only collector that opens no index store."""
TOKEN_FIELDS = ("ingest_token", "query_token")


@dataclass(frozen=True)
class Setting:
    """What one config field accepts: its type, and a range or a list of values (see :data:`SETTINGS`).

    ``int`` takes integers only (not ``7071.5``, ``true`` or ``"7071"`` in TOML); ``float`` takes
    integers too, never NaN or infinity; ``tuple`` takes an array of non-empty strings (TOML, code)
    or their comma-separated text (env var, flag), and holds a tuple.
    """

    kind: type  # int, float, str or tuple
    low: float | None = None  # the smallest value allowed
    high: float | None = None  # the largest
    above_low: bool = False  # low itself is not allowed: low=0 with above_low means "positive"
    choices: tuple[str, ...] = ()
    nonempty: bool = False
    optional: bool = False  # None allowed (the field is unset; no TOML value is None)
    secret: bool = False  # never shown in a message

    @property
    def expected(self) -> str:
        """What the setting takes, for messages: ``an integer from 1 to 65535``."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is tuple:
            return "an array of non-empty strings"
        if self.kind is str:
            return "a non-empty string" if self.nonempty else "a string"
        noun = "an integer" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            return f"{noun} from {self.low:g} to {self.high:g}"
        if self.low is not None:
            return f"{noun} {'>' if self.above_low else '>='} {self.low:g}"
        return noun

    def check(self, value: Any) -> Any:
        """``value`` as the field holds it (an integer as a float for a number); ValueError if it does not fit."""
        if value is None and self.optional:
            return None
        if self.kind is tuple:
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
                return tuple(value)
        elif self.kind is str:
            if isinstance(value, str) and (value or not self.nonempty) and (not self.choices or value in self.choices):
                return value
        elif isinstance(value, (int, float) if self.kind is float else int) and not isinstance(value, bool):
            with contextlib.suppress(OverflowError):  # an integer too large for a float
                number = self.kind(value)
                if math.isfinite(number) and self._in_range(number):
                    return number
        raise ValueError(self.expected)

    def parse(self, text: str) -> Any:
        """A flag's or an environment variable's text as the field's value; ValueError if it does not fit."""
        if self.kind is tuple:  # "a,b" (an empty text: none)
            return self.check([t.strip() for t in text.split(",")] if text.strip() else [])
        try:
            value = self.kind(text)
        except ValueError:
            raise ValueError(self.expected) from None
        return self.check(value)

    def _in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.above_low else value < self.low):
            return False
        return self.high is None or value <= self.high


_TEXT = Setting(str)
_PATH = Setting(str, optional=True)
_SIZE = Setting(int, low=0, above_low=True)  # bytes, counts: positive
_LIMIT = Setting(float, low=0)  # seconds or rates where 0 means none
_PERIOD = Setting(float, low=0, above_low=True)  # seconds: positive
SETTINGS: dict[str, Setting] = {
    "data_dir": Setting(str, nonempty=True),
    "host": Setting(str, nonempty=True),
    "port": Setting(int, low=1, high=65535),
    "ingest_token": Setting(str, optional=True, secret=True),
    "query_token": Setting(str, optional=True, secret=True),
    "store_url": _TEXT,  # "" is the default local store; the URL itself is checked by collector.store
    "log_url": _TEXT,  # "" or "file", or a kafka:// URL (parsed in CollectorConfig)
    "segment_bytes": _SIZE,
    "segment_age_s": _PERIOD,
    "durability": Setting(str, choices=DURABILITY_MODES),
    "max_body_bytes": _SIZE,
    "backlog_limit_bytes": Setting(int, low=0),
    "retention_s": _LIMIT,
    "dedup_window": _SIZE,
    "maintenance_interval_s": _PERIOD,
    "retry_after_s": _SIZE,
    "shutdown_timeout_s": _LIMIT,
    "tls_cert": _PATH,
    "tls_key": _PATH,
    "rate_limit_events_s": _LIMIT,
    "rate_limit_batches_s": _LIMIT,
    "rate_limit_burst_s": _PERIOD,
    "otlp_token_header": _TEXT,
    "trace_ui_url": _TEXT,  # its form (http(s), {trace_id}) is checked in CollectorConfig
    "tokens_file": _PATH,  # a TOML file of [[tokens]], read and checked in CollectorConfig
    "body_topics": Setting(tuple),  # topics whose captured bodies are kept; others are stripped at ingest
}
"""Each config field's type and range, the one place a value is checked (TOML, env, flags, code)."""


@dataclass(frozen=True)
class CollectorConfig:
    """Everything the collector needs; ``store_url`` defaults to ``local:<data_dir>/index.sqlite3``."""

    data_dir: str = DEFAULT_DATA_DIR
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ingest_token: str | None = field(default=None, repr=False)  # None: ingest is open
    query_token: str | None = field(default=None, repr=False)  # None: queries are open
    store_url: str = ""
    log_url: str = ""  # "" or "file": the file log under data_dir/log; kafka://HOST:PORT[,HOST:PORT]/TOPIC
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
    trace_ui_url: str = ""  # web console links a W3C trace id here: "http://jaeger:16686/trace/{trace_id}"; "": no link
    tokens_file: str | None = None  # a TOML file holding [[tokens]] (named tokens with scopes)
    body_topics: tuple[str, ...] = ()  # topics whose bodies are kept (collector.server.bodystrip); (): none
    tokens: tuple[Token, ...] = field(default=(), repr=False)  # [[tokens]]: Token objects or their tables
    access: TokenTable = field(init=False, repr=False, compare=False)
    """Every token: the named ones, the file's, and ingest_token / query_token (collector.server.tokens)."""

    def __post_init__(self) -> None:
        for name, setting in SETTINGS.items():
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, setting.check(value))
            except ValueError:
                raise CollectorConfigError(bad_value_message(name, value, setting)) from None
        for name in ("ingest_token", "query_token", "tls_cert", "tls_key", "tokens_file"):
            if getattr(self, name) == "":
                object.__setattr__(self, name, None)
        if (self.tls_cert is None) != (self.tls_key is None):
            raise CollectorConfigError("tls_cert and tls_key must be given together (or neither, for plain HTTP)")
        object.__setattr__(self, "tokens", parse_entries(self.tokens))
        from_file = read_tokens_file(self.tokens_file) if self.tokens_file else ()
        object.__setattr__(self, "access", build_table(
            {"ingest_token": self.ingest_token, "query_token": self.query_token}, self.tokens, from_file))
        if self.trace_ui_url and (
                "{trace_id}" not in self.trace_ui_url or not self.trace_ui_url.startswith(("http://", "https://"))):
            raise CollectorConfigError("trace_ui_url must be an http(s) URL containing {trace_id}, "
                                       "like http://jaeger:16686/trace/{trace_id}")
        if self.log_url not in ("", "file"):
            from collector.log.errors import BadLogUrlError
            from collector.log.kafka import MAX_RECORD_BYTES
            from collector.log.url import parse_kafka_url

            try:
                object.__setattr__(self, "log_url", parse_kafka_url(self.log_url).url)
            except BadLogUrlError as exc:
                raise CollectorConfigError(str(exc)) from None
            if self.max_body_bytes > MAX_RECORD_BYTES:
                raise CollectorConfigError(f"max_body_bytes = {self.max_body_bytes}: a Kafka log takes records of up "
                                           f"to {MAX_RECORD_BYTES} bytes (librdkafka's message.max.bytes)")
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


FIELDS = {f.name: f for f in dataclasses.fields(CollectorConfig) if f.init}
TOKENS_KEY = "tokens"
"""The one field not in :data:`SETTINGS`: an array of tables, from the TOML file or code only (no env var, no flag)."""


def env_name(field: str) -> str:
    """The environment variable for a config field."""
    return ENV_PREFIX + field.upper()


def bad_value_message(key: str, value: Any, setting: Setting) -> str:
    """``port = "abc": expected an integer from 1 to 65535`` (a secret's value is not shown)."""
    if setting.secret:
        shown = "(hidden)"
    elif isinstance(value, float):
        shown = repr(value)  # TOML's spelling, nan and inf included
    else:
        try:
            shown = json.dumps(value, ensure_ascii=False)  # TOML's spelling for strings, integers and booleans
        except (TypeError, ValueError):
            shown = str(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return f"{key} = {shown}: expected {setting.expected}"


def _from_env(env: Mapping[str, str]) -> dict[str, tuple[Any, str]]:
    values: dict[str, tuple[Any, str]] = {}
    names = [(name, name) for name in SETTINGS] + list(KEY_ALIASES.items())  # aliases last: they win
    for key, name in names:
        var = env_name(key)
        raw = env.get(var)
        if raw is None:
            continue
        setting = SETTINGS[name]
        try:
            values[name] = (setting.parse(raw), var)
        except ValueError:
            # As OpenTelemetry does: a bad env value is logged and the file's value or the default kept.
            log.warning("ignoring %s", bad_value_message(var, raw, setting))
    return values


def _from_toml(path: str) -> dict[str, tuple[Any, str]]:
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, ValueError) as exc:  # ValueError: TOMLDecodeError, or a file that is not UTF-8
        raise CollectorConfigError(f"cannot read config file {path}: {exc}") from exc
    top, doc = doc, doc.get("collector", doc)
    if not isinstance(doc, dict):
        raise CollectorConfigError(f"{path}: collector must be a table ([collector]), not {type(doc).__name__}")
    if doc is not top and TOKENS_KEY in top:
        # [[tokens]] after [collector] is a top-level array in TOML: take it as the collector's.
        if TOKENS_KEY in doc:
            raise CollectorConfigError(f"{path}: give [[tokens]] or [[collector.tokens]], not both")
        doc = {**doc, TOKENS_KEY: top[TOKENS_KEY]}
    unknown = set(doc) - set(FIELDS) - set(KEY_ALIASES)
    if unknown:
        raise CollectorConfigError(f"{path}: unknown keys {sorted(unknown)}")
    values: dict[str, tuple[Any, str]] = {}
    for key, value in doc.items():
        name = KEY_ALIASES.get(key, key)
        if name in values:
            same = sorted(k for k in doc if KEY_ALIASES.get(k, k) == name)
            raise CollectorConfigError(f"{path}: {' and '.join(same)} are the same setting; give one of them")
        if name == TOKENS_KEY:
            values[name] = (parse_entries(value, f"{path}: tokens"), path)  # checked here to name the file
            continue
        try:
            values[name] = (SETTINGS[name].check(value), path)
        except ValueError:
            raise CollectorConfigError(f"{path}: {bad_value_message(key, value, SETTINGS[name])}") from None
    return values


def _refuse_placeholder_tokens(values: Mapping[str, tuple[Any, str]]) -> None:
    for name in TOKEN_FIELDS:
        token, source = values.get(name, (None, ""))
        if isinstance(token, str) and token.startswith(TOKEN_PLACEHOLDER):
            where = (f" in /etc/tracehook/tracehook.env under systemd, or wherever {source} is set"
                     if source.startswith(ENV_PREFIX) else " there")
            raise CollectorConfigError(f"{name} from {source} is still the example's placeholder (it starts with "
                                       f"{TOKEN_PLACEHOLDER!r}): set a secret token of your own{where}")


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
    # field -> (value, where it came from: the TOML file, the env var, the command line)
    values = _from_toml(config_file) if config_file else {}
    values.update(_from_env(env))
    values.update({k: (v, "the command line") for k, v in explicit.items()})  # checked by CollectorConfig
    _refuse_placeholder_tokens(values)
    try:
        return CollectorConfig(**{name: value for name, (value, _) in values.items()})
    except TypeError as exc:
        raise CollectorConfigError(str(exc)) from exc
