"""The tracehook collector: durable ingest into a trace log, plus the query API and web page.

Run it with ``tracehook collector --data-dir DATA --port 7070`` or embed it::

    from aiohttp import web
    from collector.app import create_app
    from collector.config import CollectorConfig

    web.run_app(create_app(CollectorConfig(data_dir="data")), host="127.0.0.1", port=7070)

Modules: ``config`` (settings), ``app`` (the aiohttp application), ``ingest`` (POST
/v1/batches and group commit), ``tracelog`` (the segmented log writer and its reader API),
``logformat`` (framing, manifest, checkpoint), ``auth``, ``metrics``, ``errors``; the query
side is ``api`` and ``store``. Importing this package imports none of them.
"""
