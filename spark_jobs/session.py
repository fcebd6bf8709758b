"""The index job's SparkSession: the trace-log data source registered, local runs kept on loopback.

::

    spark = spark_session("local[2]", "1g")                  # what ``tracehook index --master local[2]`` starts
    spark = spark_session("spark://h:7077", jars=kafka_jars())  # with the Kafka connector on a cluster
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

from spark_jobs.errors import LocalStoreOnClusterError, NoSparkError

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "1g"
APP_NAME = "tracehook-index"
LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
"""Spark's log4j2 configuration in local mode: warnings and errors, no start-up banner."""
PYTHON_ENV = "PYSPARK_PYTHON"
"""The interpreter of Spark's Python workers: the user's if set, else the job's own (:func:`use_own_python`)."""


def use_own_python(environ: MutableMapping[str, str] | None = None, executable: str | None = None) -> str:
    """Point ``$PYSPARK_PYTHON`` at this interpreter unless the user set it; returns the one workers run.

    Unset, PySpark starts ``python3`` from PATH: under systemd or from a venv that is not activated
    that is the system interpreter, without tracehook, and every task fails on ``import spark_jobs``.
    PySpark reads the variable (not ``spark.pyspark.python``, a spark-submit setting) when the
    SparkContext starts, and executors on other hosts run the same path: on a cluster whose Python
    lives elsewhere, the user sets it (docs/index-job.md).
    """
    environ = os.environ if environ is None else environ
    executable = sys.executable if executable is None else executable
    if not environ.get(PYTHON_ENV) and executable:  # sys.executable is '' in an embedded interpreter
        environ[PYTHON_ENV] = executable
    return environ.get(PYTHON_ENV) or "python3"


def spark_session(master: str = DEFAULT_MASTER, driver_memory: str = DEFAULT_DRIVER_MEMORY,
                  jars: list[str] | tuple[str, ...] = ()) -> Any:
    """A SparkSession with the trace-log data source registered; ``jars`` go to ``spark.jars``
    (the Kafka connector's, :func:`spark_jobs.kafka_source.kafka_jars`)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise NoSparkError(f"PySpark is not installed: {exc}") from exc
    from spark_jobs.datasource import TraceLogSource

    use_own_python()  # before the SparkContext starts: it reads the variable then
    builder = (SparkSession.builder.master(master).appName(APP_NAME)
               .config("spark.driver.memory", driver_memory)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))  # our own progress line instead
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if master.startswith("local"):  # keep a local run on loopback; a cluster needs a reachable driver
        # SPARK_LOCAL_IP also spares the "hostname resolves to a loopback address" warnings at JVM start.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        if not os.environ.get("SPARK_CONF_DIR"):  # a user's own Spark config wins
            builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}")
    spark = builder.getOrCreate()
    spark.dataSource.register(TraceLogSource)
    return spark


def is_local_master(master: str) -> bool:
    """True for masters whose executors all run on this host (``local``, ``local[N]``, ``local-cluster[...]``)."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def check_store_for_master(master: str, store_url: str) -> None:
    """Refuse a ``local:`` store with a master whose executors may run on other hosts."""
    if store_url.startswith("local:") and not is_local_master(master):
        raise LocalStoreOnClusterError(
            f"store {store_url} is a SQLite file on one host, but master {master!r} runs executors on other "
            "hosts (each would write its own file); use an hbase:// store or a local[...] master")
