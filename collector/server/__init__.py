"""The collector service (aiohttp): :func:`collector.server.app.create_app`.

``app`` (the application, its lifecycle and middleware), ``appkeys``, ``config``, ``ingest``
(POST /v1/batches, group commit; batches are checked by :mod:`collector.wirecheck`), ``auth``, ``tls``,
``ratelimit``, ``metrics``, ``indexlag``, ``follower`` (the ``--index`` job), ``notify`` (systemd's
``READY=1``/``STOPPING=1``), the routes
``native``, ``qmq``, ``backtrack_routes``, ``otlp_http`` (+ ``otlp``), ``routes`` (shared route
helpers, the web page in ``static/``) and ``errors``, the one place errors become HTTP answers.
"""
