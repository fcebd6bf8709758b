"""The tracehook collector: everything on the service side, one subpackage per layer.

::

    collector/log/      the trace log: framing, the segmented file log, recovery, salvage (no HTTP)
    collector/store/    row keys and schema (the only place keys are built or read), SQLite, HBase,
                        the indexer, the message model and the reads by index (TraceQuery)
    collector/query/    domain logic over the store: backtracking, timeline, time and parameter parsing
    collector/server/   the aiohttp service: ingest (+ the C validator), auth, TLS, rate limits, metrics,
                        the native, QMQ, backtracking and OTLP routes, the web page
    collector/cli/      the ``tracehook`` command: collector, query, offsets, replay-list, kafka-reset, demo

Dependencies point down the list's reverse: ``cli`` → ``server`` → ``query`` → ``store`` / ``log`` →
``tracehook.wire``; ``tests/test_layout.py`` checks it. Importing this package imports none of them.
"""
