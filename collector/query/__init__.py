"""Domain logic over the index store, no HTTP: backtracking (offsets at a time, reset plans,
replay lists), the trace timeline, time and query-parameter parsing, and their ``errors``.

The reads by index themselves (:class:`collector.store.reader.TraceQuery`) live with the row
keys in :mod:`collector.store`, the only package that builds or parses them.
"""
