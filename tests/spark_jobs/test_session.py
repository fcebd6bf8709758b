"""spark_jobs.session without Spark: which interpreter the Python workers run."""

from __future__ import annotations

from spark_jobs.session import PYTHON_ENV, use_own_python


def test_workers_run_the_jobs_own_python_unless_the_user_named_one() -> None:
    env: dict[str, str] = {}
    assert use_own_python(env, "/opt/tracehook/venv/bin/python3") == "/opt/tracehook/venv/bin/python3"
    assert env == {PYTHON_ENV: "/opt/tracehook/venv/bin/python3"}  # PySpark reads it when the context starts
    env = {PYTHON_ENV: "/cluster/python3"}  # a cluster's workers keep their interpreter
    assert use_own_python(env, "/opt/tracehook/venv/bin/python3") == "/cluster/python3"
    assert env == {PYTHON_ENV: "/cluster/python3"}
    env = {PYTHON_ENV: ""}  # set but empty is unset: PySpark would run "" otherwise
    assert use_own_python(env, "/v/bin/python3") == "/v/bin/python3" == env[PYTHON_ENV]
    env = {}  # an embedded interpreter with no sys.executable: PySpark's own fallback, env untouched
    assert use_own_python(env, "") == "python3" and env == {}
