"""``tracehook index``: the command's options, their checks before Spark starts, and its run loop.

::

    tracehook index --log-dir /data/log --store local:/data/index.sqlite3 --follow
    tracehook index --log-dir /data/log --store local:/data/index.sqlite3 --every 60
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from typing import Any

from collector.cli.logformat import add_log_format_argument, configure_logging, json_line
from collector.store import absolute_store_url
from spark_jobs.driver import check_store
from spark_jobs.errors import IndexJobError, LogInputError, NoSparkError
from spark_jobs.kafka_source import JARS_ENV
from spark_jobs.lifecycle import EXIT_INTERRUPTED, Stop, wait_for_log
from spark_jobs.partition import DEFAULT_BATCH_SIZE, DEFAULT_WRITERS
from spark_jobs.report import IndexReport
from spark_jobs.session import DEFAULT_DRIVER_MEMORY, DEFAULT_MASTER, check_store_for_master, spark_session
from spark_jobs.stream import DEFAULT_TRIGGER_S, index_stream, index_window

DEFAULT_PURGE_EVERY_S = 3600.0
"""How often ``--every`` mode deletes a ``local:`` store's expired cells (a full scan of each table)."""
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_OLD_LAYOUT = 5
"""The store is in an older layout (docs/exit-codes.md): ``tracehook migrate-store`` moves it across."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tracehook index``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--log-dir", help="trace-log directory (shared by every executor on a cluster)")
    source.add_argument("--source", metavar="kafka://HOST:PORT[,HOST:PORT]/TOPIC",
                        help="read the collectors' Kafka trace topic (collector --log kafka://...) with Spark's "
                             "Kafka source instead of a trace-log directory")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N",
                        help="with --source: at most N records per micro-batch (maxOffsetsPerTrigger; default: all)")
    parser.add_argument("--from", dest="from_time", default=None, metavar="TIME",
                        help="with --source: re-index the records received from TIME (epoch ms/s, ISO-8601, -2h...) "
                             "with one batch read (startingTimestamp), without the checkpoint")
    parser.add_argument("--to", dest="to_time", default=None, metavar="TIME",
                        help="with --from: up to TIME, exclusive (endingTimestamp; default: now)")
    parser.add_argument("--store", required=True, help="local:PATH or hbase://HOST:PORT?namespace=NS")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--follow", action="store_true",
                      help="keep running: index new records seconds after the collector acknowledges them")
    mode.add_argument("--every", type=float, default=None, metavar="SECONDS",
                      help="keep running, indexing everything new every SECONDS (Trigger.AvailableNow)")
    parser.add_argument("--trigger", type=float, default=DEFAULT_TRIGGER_S, metavar="SECONDS",
                        help="with --follow: start a micro-batch every SECONDS (default: %(default)s)")
    parser.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="Spark checkpoint directory of this (log, store) pair (default: LOG_DIR/index-checkpoints/"
                             "<hash of the store URL>; for --source: $TRACEHOOK_INDEX_CHECKPOINTS or "
                             "~/.local/state/tracehook/index-checkpoints, then kafka-TOPIC-<hash of topic, bootstrap "
                             "and store>)")
    parser.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows per store put")
    parser.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY, help="spark.driver.memory")
    parser.add_argument("--writers", type=int, default=DEFAULT_WRITERS,
                        help="writer threads (store connections) per task (default: %(default)s)")
    parser.add_argument("--purge-every", type=float, default=DEFAULT_PURGE_EVERY_S, metavar="SECONDS",
                        help="with --every: delete a local: store's expired cells after the first run and then "
                             "every SECONDS (0: never; default: %(default)s)")
    parser.add_argument("--purge", action="store_true",
                        help="without --every: delete a local: store's expired cells after the run")
    parser.add_argument("--kafka-jars", default=None, metavar="PATHS",
                        help="with --source: the Spark Kafka connector's jars, comma-separated jar files or "
                             f"directories of jars (default: ${JARS_ENV}, else scripts/spark-kafka in a checkout)")
    add_log_format_argument(parser)


def check_arguments(args: argparse.Namespace) -> None:
    """Raise :class:`IndexJobError` (or ValueError) for arguments that cannot work, before Spark starts."""
    from collector.store import resolve_store_url

    if args.writers < 1:
        raise ValueError("--writers must be >= 1")
    if args.batch_size < 1:
        raise ValueError("--batch-size must be >= 1")
    # isfinite: nan passes "<= 0" checks, and Spark fails on nan or inf triggers after it started.
    if args.every is not None and not (math.isfinite(args.every) and args.every > 0):
        raise ValueError("--every must be a positive number of seconds")
    if not (math.isfinite(args.trigger) and args.trigger > 0):
        raise ValueError("--trigger must be a positive number of seconds")
    if not (math.isfinite(args.purge_every) and args.purge_every >= 0):
        raise ValueError("--purge-every must be a number of seconds >= 0 (0: never)")
    args.window, args.kafka = None, None
    if getattr(args, "source", None) is not None:
        _check_kafka_arguments(args)
    elif args.max_offsets_per_trigger is not None or args.from_time is not None or args.to_time is not None:
        raise ValueError("--max-offsets-per-trigger, --from and --to need a Kafka --source")
    else:
        _check_log_dir(args.log_dir, args.follow)
    if not args.store.startswith(("local:", "hbase://")):
        raise ValueError(f"unknown store URL {args.store!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")
    args.store = resolve_store_url(args.store)
    check_store_for_master(args.master, absolute_store_url(args.store))


def _check_kafka_arguments(args: argparse.Namespace) -> None:
    """--source and its options: the parsed topic in ``args.kafka``, a (from, to) window in ``args.window``."""
    from collector.log.errors import BadLogUrlError
    from collector.log.url import parse_kafka_url
    from collector.query.errors import BadTimeError
    from collector.query.timeparse import current_ms, parse_time

    try:
        args.kafka = parse_kafka_url(args.source)
    except BadLogUrlError as exc:
        raise ValueError(f"--source {exc}") from None
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        raise ValueError("--max-offsets-per-trigger must be >= 1")
    if args.to_time is not None and args.from_time is None:
        raise ValueError("--to needs --from")
    if args.from_time is None:
        return
    if args.follow or args.every is not None:
        raise ValueError("--from/--to re-index a window once: not with --follow or --every")
    now = current_ms()
    try:
        window = (parse_time(args.from_time, now_ms=now, name="--from"),
                  parse_time(args.to_time or "now", now_ms=now, name="--to"))
    except BadTimeError as exc:
        raise ValueError(str(exc)) from None
    if window[0] >= window[1]:
        raise ValueError("--from must be before --to")
    args.window = window


def _check_log_dir(log_dir: str, follow: bool = False) -> None:
    from collector.log.format import MANIFEST, SEGMENT_SUFFIX

    if not os.path.isdir(log_dir):
        if follow:  # the collector may start after its follower: run() waits for the log
            return
        raise IndexJobError(f"no trace log at {log_dir}: pass the collector's DATA_DIR/log")
    names = os.listdir(log_dir)
    # An empty directory is a log the collector has not written yet; anything else must look like one.
    if names and MANIFEST not in names and not any(n.endswith(SEGMENT_SUFFIX) for n in names):
        inner = os.path.join(log_dir, "log")
        hint = f"; did you mean --log-dir {inner}?" if os.path.isdir(inner) else ": pass the collector's DATA_DIR/log"
        raise IndexJobError(f"{log_dir} holds no trace log{hint}")


LOGGER = "tracehook.index"
"""The ``logger`` of the job's own JSON lines."""


class Lines:
    """The job's own lines: progress on stdout, errors on stderr; text, or JSON with ``--log-format json``."""

    def __init__(self, log_format: str = "text") -> None:
        self.json = log_format == "json"

    def say(self, text: str, *, stamp: bool = False) -> None:
        """A progress line (``stamp``: after an ``HH:MM:SS`` time in text form; JSON lines carry a time)."""
        if self.json:
            print(json_line(text, logger=LOGGER), flush=True)
        else:
            print(f"{time.strftime('%H:%M:%S')} {text}" if stamp else text, flush=True)

    def error(self, text: str) -> None:
        """An error line on stderr."""
        print(json_line(text, level="ERROR", logger=LOGGER) if self.json else text, file=sys.stderr, flush=True)


def _progress(lines: Lines) -> Any:
    def on_batch(report: IndexReport, behind: tuple[int, float] | None) -> None:
        lag = "" if behind is None else f"; lag {behind[0]} record(s), {behind[1]:.1f}s"
        lines.say(f"index: {report}{lag}", stamp=True)

    return on_batch


def _follow(spark: Any, args: argparse.Namespace, lines: Lines, stop: Stop) -> int:
    try:
        report = index_stream(spark, args.log_dir, args.store, args.batch_size, writers=args.writers,
                              checkpoint=args.checkpoint, follow_s=args.trigger, on_batch=_progress(lines),
                              source=args.kafka, max_offsets=args.max_offsets_per_trigger, stop=stop.event)
    except LogInputError as exc:
        lines.error(f"index: {exc}")
        return EXIT_BAD_INPUT
    except IndexJobError as exc:
        lines.error(f"index: {exc}")
        return EXIT_FAILED
    if stop.requested:
        lines.say(f"index: stopped by {stop.describe()}: {report}")
        return stop.exit_code()
    lines.say(f"index: stopped: {report}")  # a stopped query (e.g. from the Spark UI)
    return 0


def _reindex_window(spark: Any, args: argparse.Namespace, lines: Lines) -> int:
    try:
        report = index_window(spark, args.kafka, args.store, *args.window, args.batch_size, writers=args.writers)
    except IndexJobError as exc:
        lines.error(f"index: {exc}")
        return EXIT_FAILED
    lines.say(f"index: re-indexed {args.source} from {args.window[0]} to {args.window[1]} (epoch ms): {report}",
              stamp=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Follow, run once, or every ``--every`` seconds until stopped; prints progress lines.

    Exit codes: 0 done, or stopped by SIGTERM; 1 indexing failed (retry later), 2 bad arguments,
    3 bad input (not a trace log, a checkpoint of another log or store, records deleted before
    they were indexed), 5 a store in an older layout, 130 interrupted (SIGINT, Ctrl-C).  A follower started before its
    collector waits for the trace log to appear.
    """
    lines = Lines(getattr(args, "log_format", "text"))
    if lines.json:  # warnings of the job's own modules (damaged frames, retention records) as JSON too
        configure_logging("WARNING", "json")
    # Refused before Spark starts: bad numbers, a log dir with no trace log, a cluster master with a local: store.
    from collector.store.errors import BadStoreUrlError, LayoutVersionError, SaltBucketsMismatchError

    try:
        check_arguments(args)
        check_store(absolute_store_url(args.store))
    except LayoutVersionError as exc:  # an old store: the line names the command that moves it across
        lines.error(f"index: {exc}")
        return EXIT_OLD_LAYOUT
    except (IndexJobError, ValueError, BadStoreUrlError, SaltBucketsMismatchError) as exc:
        lines.error(f"index: {exc}")
        return EXIT_USAGE
    stop = Stop.install()  # stop between batches: the running batch is redone next time
    try:
        return _start(args, lines, stop)
    finally:
        stop.restore()


def _start(args: argparse.Namespace, lines: Lines, stop: Stop) -> int:
    from collector.log.errors import NotATraceLogError
    from collector.log.state import read_log_id

    jars: list[str] = []
    if args.kafka is None:
        try:
            if args.follow and not wait_for_log(args.log_dir, stop, lines.say):
                return stop.exit_code()
            read_log_id(args.log_dir)
        except NotATraceLogError as exc:
            lines.error(f"index: {exc}")
            return EXIT_BAD_INPUT
    else:
        from spark_jobs.kafka_source import kafka_jars

        try:
            jars = kafka_jars(getattr(args, "kafka_jars", None))
        except IndexJobError as exc:
            lines.error(f"index: {exc}")
            return EXIT_USAGE
    try:
        spark = spark_session(args.master, args.driver_memory, jars)
    except NoSparkError as exc:
        lines.error(f"index: {exc} (install it with: pip install 'tracehook[index]')")
        return EXIT_USAGE
    stop.rearm()
    try:
        if stop.requested:
            return stop.exit_code()
        if args.window is not None:
            return _reindex_window(spark, args, lines)
        if args.follow:
            return _follow(spark, args, lines, stop)
        return _repeat(spark, args, lines, stop)
    except KeyboardInterrupt:  # a second signal while stopping
        return EXIT_INTERRUPTED
    finally:
        # A JVM that got the stop signal too may be gone already: nothing left to stop then.
        with contextlib.suppress(*(() if not stop.requested else (Exception,))):
            spark.stop()


def _repeat(spark: Any, args: argparse.Namespace, lines: Lines, stop: Stop) -> int:
    """One run (``Trigger.AvailableNow``), or one every ``--every`` seconds until stopped."""
    total_events = 0
    last_purge: float | None = None
    while True:
        now = time.monotonic()
        if args.every is None:
            purge = args.purge
        else:
            purge = args.purge_every > 0 and (last_purge is None or now - last_purge >= args.purge_every)
        try:
            report = index_stream(spark, args.log_dir, args.store, args.batch_size, writers=args.writers,
                                  purge=purge, checkpoint=args.checkpoint, source=args.kafka,
                                  max_offsets=args.max_offsets_per_trigger, stop=stop.event)
        except LogInputError as exc:
            lines.error(f"index: {exc}")
            return EXIT_BAD_INPUT
        except IndexJobError as exc:
            lines.error(f"index: {exc}")
            if args.every is None:
                return EXIT_FAILED
        else:
            if report.purged is not None:
                last_purge = now
            total_events += report.events
            stopped = f" (stopped by {stop.describe()})" if stop.requested else ""
            lines.say(f"index: {report} (total {total_events} events){stopped}", stamp=True)
        if stop.requested:
            return stop.exit_code()
        if args.every is None:
            return 0
        if stop.wait(args.every):
            return stop.exit_code()
