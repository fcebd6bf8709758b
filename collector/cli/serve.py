"""``tracehook collector``: run the collector service.

::

    tracehook collector --data-dir /var/lib/tracehook --port 7070
    tracehook collector --store hbase://hbase-1:9090?namespace=trace   # starts even when HBase is down
    tracehook collector --data-dir /var/lib/tracehook --index   # and a follow-mode index job (embedded)
    TRACEHOOK_COLLECTOR_INGEST_TOKEN=s3cret tracehook collector --config collector.toml

Flags override env vars (``TRACEHOOK_COLLECTOR_*``), which override the TOML file.
Prefer env vars or the file for tokens: flags are visible in the process list.
SIGTERM and SIGINT stop it gracefully: in-flight batches are committed first.
Under systemd (``Type=notify``, deploy/systemd/) it sends ``READY=1`` once its log is recovered
and it listens, and ``STOPPING=1`` when it begins to stop (:mod:`collector.server.notify`).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

from collector.cli.logformat import add_log_format_argument, configure_logging
from collector.server.config import SETTINGS, CollectorConfig, load_config
from collector.server.errors import CollectorConfigError

# flag -> (config field, help); each flag's type and range are its field's (collector.server.config.SETTINGS)
_FLAGS: list[tuple[str, str, str]] = [
    ("--data-dir", "data_dir", "where the trace log (DATA/log) and the default local index live"),
    ("--host", "host", "address to listen on (default 127.0.0.1)"),
    ("--port", "port", "port to listen on (default 7070)"),
    ("--ingest-token", "ingest_token", "bearer token required to POST batches"),
    ("--query-token", "query_token", "bearer token required for queries"),
    ("--tokens-file", "tokens_file", "TOML file of [[tokens]]: named tokens with scopes (see docs/collector.md)"),
    ("--store", "store_url", "index store: local:PATH or hbase://host:port?namespace=NS, or none "
                             "(alias: --store-url)"),
    ("--log", "log_url", "trace log: file (DATA/log, the default) or kafka://HOST:PORT[,HOST:PORT]/TOPIC "
                         "(each batch one record, acks=all, idempotent producer)"),
    ("--segment-bytes", "segment_bytes", "seal a segment at this size"),
    ("--segment-age", "segment_age_s", "seal a non-empty segment after this many seconds"),
    ("--durability", "durability", "fsync: fsync every commit group (default); os: leave it to the OS"),
    ("--max-body-bytes", "max_body_bytes", "largest batch accepted (413 above)"),
    ("--backlog-limit-bytes", "backlog_limit_bytes", "answer 429 above this many unindexed bytes (0: never)"),
    ("--retention", "retention_s", "delete indexed segments sealed longer ago than this (seconds)"),
    ("--tls-cert", "tls_cert", "PEM certificate (chain): serve HTTPS; needs --tls-key"),
    ("--tls-key", "tls_key", "PEM private key (unencrypted) for --tls-cert"),
    ("--rate-limit-events", "rate_limit_events_s", "events per second per client id (0: unlimited)"),
    ("--rate-limit-batches", "rate_limit_batches_s", "batches per second per client id (0: unlimited)"),
    ("--rate-limit-burst", "rate_limit_burst_s", "seconds of its rate a client may send at once (default 2)"),
    ("--trace-ui-url", "trace_ui_url", "web console links trace ids to this URL template, e.g. "
                                       "'http://jaeger:16686/trace/{trace_id}'"),
]
FLAG_ALIASES = {"--store": ["--store-url"]}
"""Older names that still work (every command names the index store ``--store``)."""


def _flag_type(name: str) -> Callable[[str], Any]:
    """argparse's ``type=`` for a config field: its value, or argparse's one-line error naming the flag."""
    setting = SETTINGS[name]

    def parse(text: str) -> Any:
        try:
            return setting.parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {setting.expected}, not {text!r}") from None

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``tracehook collector``."""
    parser.add_argument("--config", metavar="TOML", help="TOML config file (keys are the config field names)")
    for flag, dest, help_ in _FLAGS:
        parser.add_argument(flag, *FLAG_ALIASES.get(flag, []), dest=dest, type=_flag_type(dest), default=None,
                            help=help_)
    parser.add_argument("--index", action="store_true",
                        help="also run the index job in follow mode (tracehook index --follow) on this collector's "
                             "log and store, stopped with the collector; needs PySpark")
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    add_log_format_argument(parser)


def config_from_args(args: argparse.Namespace) -> CollectorConfig:
    """The config the parsed flags describe (env vars and the TOML file fill the rest)."""
    explicit = {dest: getattr(args, dest) for _, dest, _ in _FLAGS}
    return load_config(explicit, config_file=args.config)


def run(args: argparse.Namespace) -> int:
    """Run the collector until SIGTERM/SIGINT; returns the exit code."""
    configure_logging(args.log_level, getattr(args, "log_format", "text"))
    try:
        config = config_from_args(args)
    except CollectorConfigError as exc:
        print(f"tracehook collector: {exc}", file=sys.stderr)
        return 2
    if config.store_enabled:
        from collector.store import check_store_url
        from collector.store.errors import BadStoreUrlError

        try:
            check_store_url(config.store_url)
        except BadStoreUrlError as exc:
            print(f"tracehook collector: store: {exc}", file=sys.stderr)
            return 2
    from collector.server.logredact import install_redaction
    from collector.server.tls import server_ssl_context

    index = getattr(args, "index", False)
    if index and not config.store_enabled:
        print("tracehook collector: --index needs a store (--store is none)", file=sys.stderr)
        return 2
    if index and importlib.util.find_spec("pyspark") is None:
        print("tracehook collector: --index needs PySpark (pip install -e '.[index]')", file=sys.stderr)
        return 2
    if config.log_url.startswith("kafka://") and importlib.util.find_spec("confluent_kafka") is None:
        print("tracehook collector: --log kafka:// needs confluent-kafka (pip install -e '.[collector,kafka]')",
              file=sys.stderr)
        return 2
    install_redaction(config.access.values())
    try:
        ssl_context = server_ssl_context(config)
    except CollectorConfigError as exc:
        print(f"tracehook collector: {exc}", file=sys.stderr)
        return 2
    scheme = "https" if ssl_context else "http"
    # SIGINT and SIGTERM stop it gracefully (collector.server.drain): new batches get 503, requests in
    # progress finish (up to shutdown_timeout_s), then run_app's stop commits what is queued and syncs the log.
    try:
        _serve(config, ssl_context, scheme, index=index)
    except OSError as exc:  # port in use, address not available, data dir not writable
        print(f"tracehook collector: cannot start on {config.host}:{config.port} with data in {config.data_dir}: "
              f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}", file=sys.stderr)
        return 1
    return 0


def _serve(config: CollectorConfig, ssl_context: object, scheme: str, *, index: bool = False) -> None:
    # aiohttp here, not at the top: every `tracehook` command imports this module to build its
    # parser, and aiohttp's import alone was a quarter of a second of each `tracehook query`.
    from aiohttp import web

    from collector.server.app import create_app
    from collector.server.appkeys import INGESTOR_KEY
    from collector.server.drain import AFTER_DRAIN_S, drain_on_signals
    from collector.server.notify import READY, STOPPING, notify

    app = create_app(config)
    if index:
        from collector.server.follower import index_follower

        app.cleanup_ctx.append(index_follower(config))  # after the log's: it starts once the log is open

    ready: list[bool] = []

    def begin_stop(app: web.Application) -> None:  # the first thing a SIGTERM/SIGINT does
        if ready:  # a start that failed was never READY: systemd sees the exit code
            notify(STOPPING)
        if INGESTOR_KEY in app:
            app[INGESTOR_KEY].begin_shutdown()  # new batches: 503; those in progress finish

    app.on_startup.append(drain_on_signals(config.shutdown_timeout_s, begin_stop))

    def listening(msg: str) -> None:
        # run_app calls this once every site listens, after cleanup_ctx opened (and recovered) the log.
        logging.getLogger("collector").info(
            "listening on %s://%s:%d (data in %s)", scheme, config.host, config.port, config.data_dir)
        notify(READY)
        ready.append(True)

    web.run_app(
        app,
        host=config.host,
        port=config.port,
        ssl_context=ssl_context,
        shutdown_timeout=AFTER_DRAIN_S,  # the drain waited for requests in progress already
        handle_signals=True,  # until the drain's handlers replace run_app's, once the log is open
        access_log=None,  # no access log: nothing per request to leak or to slow ingest
        print=listening,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m collector ...``: the same as ``tracehook collector ...``."""
    from collector.cli.main import OneLineParser

    parser = OneLineParser(prog="python -m collector", description="Run the tracehook collector.")
    add_arguments(parser)
    return run(parser.parse_args(argv))
