"""The ``tracehook`` command (:func:`collector.cli.main.main`): one module per subcommand.

``serve`` (tracehook collector), ``query``, ``backtrack`` (offsets, replay-list), ``kafka_reset``,
``demo``; ``tracehook index`` is :mod:`spark_jobs.index_job`. ``errors`` holds the command
line's named errors and which errors are reported as one line; ``logformat`` the text or JSON
log lines (``--log-format``) of the collector and the index job.
"""
