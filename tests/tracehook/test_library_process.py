"""Process lifecycle: flush at interpreter exit (a real subprocess) and fork safety."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import pytest

import tracehook

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_script(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_events_are_flushed_at_exit(stub):
    # The app never calls flush(): the atexit handler must deliver what is queued.
    result = run_script(
        """
        import tracehook
        tracehook.configure(app="exiting", linger_s=30)  # a long linger: only the exit flush sends
        for i in range(500):
            tracehook.record_send("orders", f"m-{i}")
        """,
        {"TRACEHOOK_COLLECTORS": stub.url},
    )
    assert result.returncode == 0, result.stderr
    assert sorted(e.msg_id for e in stub.events()) == sorted(f"m-{i}" for i in range(500))
    assert {b.header.app for b in stub.batches} == {"exiting"}


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A URL whose server accepts connections and reads requests but never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)  # kept open and never written to

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stopping.set()
    server.close()
    for conn in held:
        conn.close()


def test_exit_flush_gives_up_at_its_deadline_when_no_collector_answers(silent_collector):
    # Registered before tracehook is imported, so it runs after tracehook's exit flush (atexit is LIFO).
    request_timeout_s = 30.0
    started = time.monotonic()
    result = run_script(
        f"""
        import atexit, json
        atexit.register(lambda: print(json.dumps(__import__("tracehook").stats())))
        import tracehook
        tracehook.configure(app="stuck", timeout_s={request_timeout_s}, exit_timeout_s=0.5, linger_s=0.01)
        tracehook.record_send("orders", "m-1")
        tracehook.flush(0.3)  # the batch is now stuck in a request the collector never answers
        for i in range(9):
            tracehook.record_send("orders", f"m-{{i + 2}}")
        """,
        {"TRACEHOOK_COLLECTORS": silent_collector},
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < request_timeout_s / 2  # the deadline, not the request timeout, ended the exit
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert stats["emitted"] == 10 and stats["sent"] == 0
    assert stats["dropped"]["shutdown"] == 10 and stats["queued"] == 0 and stats["in_flight"] == 0


def test_environment_only_configuration(stub):
    result = run_script(
        """
        import tracehook
        tracehook.record_send("orders", "from-env")   # get_tracer() builds the tracer from TRACEHOOK_*
        assert tracehook.flush(10)
        print(tracehook.stats()["sent"])
        """,
        {"TRACEHOOK_COLLECTORS": stub.url, "TRACEHOOK_APP": "envapp", "TRACEHOOK_TOKEN": "tok"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
    assert stub.auth_headers == ["Bearer tok"] and stub.batches[0].header.app == "envapp"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_gets_its_own_queue_thread_and_client_id(stub, make_tracer, accounted):
    tracer = make_tracer(stub.url)
    tracer.record_send("orders", "parent-1")
    assert tracer.flush(10)
    stub.hold()
    tracer.record_send("orders", "parent-2")  # in flight in the parent's thread at fork time
    assert stub.waiting.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only
        code = 1
        try:
            stats = tracer.stats()
            fresh = stats["emitted"] == 0 and stats["in_flight"] == 0
            tracer.record_send("orders", "child-1")
            ok = tracer.flush(10)
            code = 0 if fresh and ok and tracer.stats()["sent"] == 1 else 2
        finally:
            os._exit(code)
    stub.release()  # the child's request must not wait for the parent's held one
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert tracer.flush(10)
    accounted(tracer.stats())
    assert tracer.stats()["sent"] == 2
    by_client = {}
    for batch in stub.batches:
        by_client.setdefault(batch.header.client_id, set()).update(e.msg_id for e in batch.events)
    assert by_client[tracer.client_id] == {"parent-1", "parent-2"}
    (child_ids,) = [ids for client, ids in by_client.items() if client != tracer.client_id]
    assert child_ids == {"child-1"}


def test_fork_renews_generated_ids(make_tracer):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, tracehook.new_msg_id().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child_id = os.read(read, 100).decode()
    os.close(read)
    assert child_id[:16] != tracehook.new_msg_id()[:16]
