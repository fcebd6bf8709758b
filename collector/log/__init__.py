"""The trace log: every accepted batch, durable before the collector answers 200.

``format`` (frames, manifest, salvage), ``file`` (the segmented file log: writer, recovery,
reader API), ``state`` (log id, durable end, index commits), ``pending`` (what is logged but not
indexed yet), ``errors``. No HTTP here: :mod:`collector.server.errors` says how errors are answered.
"""
