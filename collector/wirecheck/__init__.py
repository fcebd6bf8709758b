"""Batch validation for the collector's ingest and the index job's decode: :mod:`.validate`.

Its own subpackage (below ``server`` and ``store``, above only the wire format ``tracehook.wire``)
so both the ingest routes and the indexer use the optional C validator ``_wirecheck.c``
without the store importing the HTTP service.
"""
