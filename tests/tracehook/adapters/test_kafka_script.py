"""scripts/kafka formats storage with any generated cluster id, including the ~1 in 64 starting with "-",
and keeps its jars where ``KAFKA_CACHE_DIR`` says."""

from __future__ import annotations

import base64
import os
import pathlib
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "kafka"


def format_args(n: int, **env: str) -> list[tuple[str, list[str]]]:
    """(cluster id, StorageTool arguments) for ``n`` ids generated the way ``scripts/kafka start`` makes them."""
    out = subprocess.run([str(SCRIPT), "format-args", str(n)], check=True, capture_output=True, text=True,
                         env={**os.environ, **env}).stdout
    rows = [line.split("\t") for line in out.splitlines()]
    return [(row[0], row[1:]) for row in rows]


def test_every_generated_cluster_id_is_one_argument_of_the_storage_tool(tmp_path: pathlib.Path) -> None:
    rows = format_args(1000, KAFKA_RUN_DIR=str(tmp_path))
    assert len(rows) == 1000
    for cluster, args in rows:
        assert len(base64.urlsafe_b64decode(cluster + "==")) == 16  # a UUID, as KRaft wants it
        # The id is glued to its option, so no argument is the bare id, however it starts.
        assert args == ["format", f"--cluster-id={cluster}", "-c", str(tmp_path / "conf" / "server.properties")]
    # ~1 in 64 ids starts with "-": with 1000 the chance of none is ~1e-7.
    assert any(cluster.startswith("-") for cluster, _ in rows)


@pytest.mark.kafka
def test_the_storage_tool_accepts_an_id_starting_with_a_dash(tmp_path: pathlib.Path) -> None:
    # The real StorageTool with the script's arguments ("-t -abc..." failed: "expected one argument").
    cache = pathlib.Path(os.environ.get("KAFKA_CACHE_DIR", ROOT / ".cache" / "kafka"))
    classpath = cache / os.environ.get("KAFKA_VERSION", "4.1.1") / "classpath.txt"
    if not classpath.exists():
        subprocess.run([str(SCRIPT), "fetch"], check=True, capture_output=True, timeout=600)
    cluster = "-" + base64.urlsafe_b64encode(bytes(16)).decode().rstrip("=")[1:]
    ((_, args),) = format_args(1, KAFKA_RUN_DIR=str(tmp_path), KAFKA_CLUSTER_ID=cluster)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "server.properties").write_text(
        "process.roles=broker,controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:9\n"
        "listeners=PLAINTEXT://127.0.0.1:8,CONTROLLER://127.0.0.1:9\ncontroller.listener.names=CONTROLLER\n"
        f"log.dirs={tmp_path / 'data'}\n")
    done = subprocess.run(["java", "-cp", classpath.read_text().strip(), "kafka.tools.StorageTool", *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"cluster.id={cluster}" in (tmp_path / "data" / "meta.properties").read_text()


def test_jar_cache_dir_comes_from_kafka_cache_dir(tmp_path: pathlib.Path) -> None:
    # A copy of the script in a fresh "repo": its default cache (<repo>/.cache/kafka) starts empty.
    script = tmp_path / "repo" / "scripts" / "kafka"
    script.parent.mkdir(parents=True)
    shutil.copy(SCRIPT, script)
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAFKA_")} | {"KAFKA_VERSION": "9.9.9"}
    for cache in (tmp_path / "shared-cache", tmp_path / "repo" / ".cache" / "kafka"):
        (cache / "9.9.9").mkdir(parents=True)
        (cache / "9.9.9" / "classpath.txt").write_text("/jars/a.jar\n")
    done = subprocess.run([str(script), "fetch"], capture_output=True, text=True,
                          env={**env, "KAFKA_CACHE_DIR": str(tmp_path / "shared-cache")})
    assert (done.returncode, done.stdout) == (0, f"Kafka 9.9.9 already fetched: {tmp_path}/shared-cache/9.9.9\n")
    done = subprocess.run([str(script), "fetch"], capture_output=True, text=True, env=env)  # the default
    assert done.stdout == f"Kafka 9.9.9 already fetched: {tmp_path}/repo/.cache/kafka/9.9.9\n"
