"""Process lifecycle: flush at interpreter exit (a real subprocess) and fork safety."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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


def test_exit_flush_gives_up_at_its_deadline_when_no_collector_answers(stub):
    stub.hold()  # requests hang: the exit must still end within the configured timeout
    result = run_script(
        """
        import time, tracehook
        tracehook.configure(app="stuck", timeout_s=30)
        tracehook.record_send("orders", "m-1")
        """,
        {"TRACEHOOK_COLLECTORS": stub.url, "TRACEHOOK_EXIT_TIMEOUT_MS": "300"},
    )
    stub.release()
    assert result.returncode == 0, result.stderr


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
