"""The package's face: its public names load on first use, so an executor's import stays small."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import spark_jobs

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_package_and_a_task_module_loads_neither_pyspark_nor_the_job() -> None:
    code = ("import json, sys; import spark_jobs, spark_jobs.partition; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'spark_jobs'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert json.loads(done.stdout) == ["spark_jobs", "spark_jobs.partition"]


@pytest.mark.parametrize("name", spark_jobs.__all__)
def test_each_public_name_is_the_one_its_module_defines(name: str) -> None:
    defining = importlib.import_module(spark_jobs._EXPORTS[name])
    assert getattr(spark_jobs, name) is getattr(defining, name)
    assert name in dir(spark_jobs)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        spark_jobs.nope  # noqa: B018


def test_the_command_entry_module_is_the_cli() -> None:
    from spark_jobs import cli, index_job

    assert (index_job.add_arguments, index_job.run) == (cli.add_arguments, cli.run)
