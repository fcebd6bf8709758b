"""A full data dir: ingest answers 503 ``disk_full``, writes nothing torn, and resumes by itself.

The disk is real: each test mounts a 1 MiB tmpfs (needs root or CAP_SYS_ADMIN: without, the tests
fail, as CI and the dev machines run as root) and fills
it with a filler file plus batches; deleting the filler is "space returns".
"""

from __future__ import annotations

import errno
import os
import pathlib
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
import requests
from collector_service_helpers import make_batch
from fixtures.tracelog import assert_log_is_clean

import tracehook
from collector.log import file as tracelog
from collector.log.errors import DiskFull
from collector.log.file import TraceLog
from tracehook import wire

MSGPACK = {"Content-Type": "application/msgpack"}
TMPFS_BYTES = 1024 * 1024
MAX_POSTS = 3000  # bounds every fill loop: 1 MiB holds a few hundred of these batches


@pytest.fixture
def small_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A 1 MiB tmpfs mounted for this test only; unmounted at the end whatever happened."""
    yield from _mount_tmpfs(tmp_path / "disk", f"size={TMPFS_BYTES}")


@pytest.fixture
def full_disk(tmp_path: pathlib.Path) -> Iterator[pathlib.Path]:
    """A 1 MiB tmpfs with room for 32 files, filled: no byte and no inode left (the
    collector cannot even create its data dir); removing ``fillers/`` frees both."""
    for mnt in _mount_tmpfs(tmp_path / "full", f"size={TMPFS_BYTES},nr_inodes=32"):
        fillers = mnt / "fillers"
        fillers.mkdir()
        _fill_up(fillers / "bytes")
        for i in range(64):
            try:
                (fillers / f"inode-{i}").touch()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        else:
            pytest.fail("the tmpfs inode limit did not apply")
        yield mnt


def _mount_tmpfs(mnt: pathlib.Path, options: str) -> Iterator[pathlib.Path]:
    mnt.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mnt)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"cannot mount a tmpfs here: {exc}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {done.stderr.strip()}", pytrace=False)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)  # still busy: detach


def _fill_up(path: pathlib.Path) -> None:
    """Write until the file system has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def _fill(path: pathlib.Path, nbytes: int) -> None:
    with open(path, "wb") as f:
        f.write(b"\0" * nbytes)


@pytest.mark.parametrize("segment_bytes", [64 * 1024, 1], ids=["append", "seal-every-append"])
def test_tracelog_cuts_torn_frames_on_a_full_disk_and_resumes(
    small_disk: pathlib.Path, segment_bytes: int, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = str(small_disk / "log")
    filler = small_disk / "filler"
    _fill(filler, TMPFS_BYTES // 2)
    tl = TraceLog.open(log_dir, segment_bytes=segment_bytes)
    # 5 KB payloads straddle tmpfs's 4 KB pages, so the failing write is a short one.
    payload = make_batch("c", 0, n=60)
    kept, failures = 0, 0
    for seq in range(MAX_POSTS):
        try:
            tl.append([(1, "c", seq, payload)])
            kept += 1
        except DiskFull:
            failures += 1
            size = os.path.getsize(os.path.join(log_dir, tracelog.segment_name(tl.active_base)))
            assert size == tl.active_size  # the partial frame was cut
            if failures == 5:
                break
    assert failures == 5 and kept > 0
    assert len(assert_log_is_clean(log_dir)) == kept
    if segment_bytes == 1:  # the manifest had no room either: the seal failed, the segment stayed active
        assert "appending to the active segment" in caplog.text
        sealed = len(tracelog.sealed_segments(log_dir))
        assert sealed + tl.active_records == kept and sealed < kept - 1
    os.remove(filler)
    assert tl.append([(1, "c", 10_000, payload)]) == [kept]
    if segment_bytes == 1:  # with space back, the seal that failed is done first
        assert len(tracelog.sealed_segments(log_dir)) == sealed + 1
    tl.close()
    records = assert_log_is_clean(log_dir)
    assert [r.seq for r in records] == [*range(kept), 10_000]


def test_a_cut_that_failed_is_redone_before_the_next_append(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tl = TraceLog.open(str(tmp_path))
    tl.append([(1, "c", 0, b"first")])
    real_write, real_ftruncate = os.write, os.ftruncate

    def short_then_full(fd: int, data: bytes) -> int:
        if len(data) > 10:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, "No space left on device")

    def cannot_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(os, "write", short_then_full)
    monkeypatch.setattr(os, "ftruncate", cannot_truncate)
    with pytest.raises(DiskFull):
        tl.append([(1, "c", 1, b"torn")])
    monkeypatch.setattr(os, "write", real_write)
    with pytest.raises(tracelog.StorageError):  # still cannot cut: refuse rather than write after the tear
        tl.append([(1, "c", 2, b"refused")])
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)
    assert tl.append([(1, "c", 3, b"after")]) == [1]
    tl.close()
    scan = tracelog.scan_segment(os.path.join(str(tmp_path), tracelog.segment_name(0)))
    assert scan.error is None and [r.payload for r in scan.records] == [b"first", b"after"]


@pytest.mark.slow
def test_collector_answers_503_disk_full_and_resumes_when_space_returns(
    small_disk: pathlib.Path, collector_process
) -> None:
    filler = small_disk / "filler"
    _fill(filler, TMPFS_BYTES // 2)
    collector = collector_process(str(small_disk), "--segment-bytes", str(64 * 1024),
                                  env={"TRACEHOOK_COLLECTOR_RETRY_AFTER_S": "1"})
    url = collector.url + "/v1/batches"
    acked: dict[int, int] = {}  # seq -> offset
    refused: list[int] = []
    with requests.Session() as http:
        for seq in range(MAX_POSTS):
            resp = http.post(url, data=make_batch("c", seq, n=60), headers=MSGPACK, timeout=30)
            assert resp.status_code in (200, 503), resp.text
            if resp.status_code == 200:
                acked[seq] = resp.json()["offset"]
                continue
            assert resp.json()["error"] == "disk_full"
            assert resp.headers["Retry-After"] == "1"
            refused.append(seq)
            if len(refused) == 10:  # a few in a row: each one is a real failed write
                break
        assert len(refused) == 10 and acked
        assert {r.seq: r.offset for r in assert_log_is_clean(str(small_disk / "log"))} == acked
        assert requests.get(collector.url + "/healthz", timeout=5).status_code == 200

        os.remove(filler)
        # Nothing to restart or reset: the next batch is written. The refused ones were
        # never kept, so sending them again appends them; an acknowledged one is a duplicate.
        for seq in [*refused, *range(MAX_POSTS, MAX_POSTS + 50)]:
            resp = http.post(url, data=make_batch("c", seq, n=60), headers=MSGPACK, timeout=30)
            assert resp.status_code == 200, resp.text
            assert resp.json()["duplicate"] is False
            acked[seq] = resp.json()["offset"]
        first = min(acked)
        resp = http.post(url, data=make_batch("c", first, n=60), headers=MSGPACK, timeout=30)
        assert resp.json() == {"offset": acked[first], "events": 60, "duplicate": True}
        metrics = http.get(collector.url + "/metrics", timeout=5).text
        assert 'tracehook_collector_rejected_total{reason="disk_full"} 10' in metrics
    assert collector.stop() == 0
    records = assert_log_is_clean(str(small_disk / "log"))
    assert {r.seq: r.offset for r in records} == acked  # every acknowledged batch exactly once


@pytest.mark.slow
def test_library_delivers_everything_after_a_disk_full_period(small_disk: pathlib.Path, collector_process) -> None:
    filler = small_disk / "filler"
    _fill(filler, TMPFS_BYTES - 64 * 1024)  # room for a few batches only
    collector = collector_process(str(small_disk), env={"TRACEHOOK_COLLECTOR_RETRY_AFTER_S": "1"})
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(collector.url,), linger_s=0.01))
    try:
        sent = [tracer.record_send("orders", f"m-{i}", keys="k" * 200) for i in range(2000)]
        deadline = time.monotonic() + 60
        while "tracehook_collector_disk_full 1" not in requests.get(collector.url + "/metrics", timeout=5).text:
            assert time.monotonic() < deadline, "the collector never reported a full disk"
            time.sleep(0.1)
        os.remove(filler)
        assert tracer.flush(timeout=60)
        stats = tracer.stats()
        assert (stats["sent"], stats["dropped_total"]) == (len(sent), 0)
        assert stats["retried"] > 0  # it did meet the 503s
    finally:
        tracer.close(timeout=10)
    records = assert_log_is_clean(str(small_disk / "log"))
    events = [e.msg_id for r in records for e in wire.decode_batch(r.payload).events]
    assert sorted(events) == sorted(sent)  # all delivered, none twice


@pytest.mark.slow
def test_collector_starts_on_a_full_disk_degraded_and_resumes_when_space_returns(
    full_disk: pathlib.Path, tmp_path: pathlib.Path, collector_process
) -> None:
    data_dir = full_disk  # its log/ cannot be created: no inode left (the process output goes next to it)
    store = tmp_path / "index.sqlite3"  # the index lives elsewhere, as an HBase would
    collector = collector_process(str(data_dir), "--store-url", f"local:{store}",
                                  env={"TRACEHOOK_COLLECTOR_RETRY_AFTER_S": "1"})
    url = collector.url + "/v1/batches"
    with requests.Session() as http:
        health = http.get(collector.url + "/healthz", timeout=5).json()
        assert health["status"] == "disk_full" and health["disk"]["full"] is True
        assert health["disk"]["free_inodes"] == 0 and health["store"] == "ok"
        # Queries are served while ingest is refused.
        assert http.get(collector.url + "/v1/messages/nope", timeout=5).status_code == 404
        for seq in range(3):
            resp = http.post(url, data=make_batch("c", seq), headers=MSGPACK, timeout=30)
            assert resp.status_code == 503, resp.text
            assert resp.json()["error"] == "disk_full" and resp.headers["Retry-After"] == "1"
        metrics = http.get(collector.url + "/metrics", timeout=5).text
        assert "tracehook_collector_disk_full 1" in metrics
        assert 'tracehook_collector_rejected_total{reason="disk_full"} 3' in metrics
        assert not (data_dir / "log").exists()

        shutil.rmtree(full_disk / "fillers")  # space returns; no restart
        deadline = time.monotonic() + 30
        while True:
            resp = http.post(url, data=make_batch("c", 0), headers=MSGPACK, timeout=30)
            if resp.status_code == 200:
                break
            assert resp.status_code == 503 and resp.json()["error"] == "disk_full", resp.text
            assert time.monotonic() < deadline, "ingest never resumed"
            time.sleep(0.2)  # Retry-After is 1 s: recovery is retried at most once a second
        assert resp.json() == {"offset": 0, "events": 3, "duplicate": False}
        health = http.get(collector.url + "/healthz", timeout=5).json()
        assert health["status"] == "ok" and health["disk"]["full"] is False and health["log_bytes"] > 0
        assert "tracehook_collector_disk_full 0" in http.get(collector.url + "/metrics", timeout=5).text
        assert http.post(url, data=make_batch("c", 0), headers=MSGPACK, timeout=30).json()["duplicate"] is True
    assert collector.stop() == 0
    assert [r.seq for r in assert_log_is_clean(str(data_dir / "log"))] == [0]


def test_tracelog_open_defers_recovery_on_a_full_disk(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log_dir = str(tmp_path / "log")
    before, refused, after = (make_batch("c", seq) for seq in range(3))
    TraceLog.open(log_dir).append([(1, "c", 0, before)])  # a log with a record to recover (left unclosed)
    real_open = os.open

    def no_space(path: str, flags: int, *args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "open", no_space)
    with pytest.raises(DiskFull):
        TraceLog.open(log_dir)
    tl = TraceLog.open(log_dir, defer_if_full=True)
    assert tl.recovery_pending
    with pytest.raises(DiskFull):
        tl.append([(1, "c", 1, refused)])
    with pytest.raises(DiskFull):
        tl.retry_recovery()
    monkeypatch.setattr(os, "open", real_open)
    assert tl.retry_recovery() == [("c", 0, 0)]  # the dedup seed of what was recovered
    assert not tl.recovery_pending and tl.retry_recovery() == []
    assert tl.append([(1, "c", 2, after)]) == [1]
    tl.close()
    assert [r.payload for r in assert_log_is_clean(log_dir)] == [before, after]


@pytest.mark.slow
def test_library_fails_over_from_a_full_disk_collector(
    full_disk: pathlib.Path, tmp_path: pathlib.Path, collector_process, monkeypatch
) -> None:
    from tracehook import dispatcher

    monkeypatch.setattr(dispatcher, "first_collector", lambda client_id, collectors: 0)
    env = {"TRACEHOOK_COLLECTOR_RETRY_AFTER_S": "1"}
    full = collector_process(str(full_disk), env=env)  # started degraded: every batch gets 503 disk_full
    healthy = collector_process(str(tmp_path / "healthy"), env=env)
    # The full one first: the dispatcher meets it first, and again whenever it is not busy.
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(full.url, healthy.url), linger_s=0.01,
                                                     max_retries=0, flush_at_exit=False))
    sent: list[str] = []
    try:
        for wave in range(3):  # over ~2 s: the full one's Retry-After runs out in between
            sent += [tracer.record_send("orders", f"m-{wave}-{i}") for i in range(300)]
            assert tracer.flush(timeout=30)
            time.sleep(1.0)
        stats = tracer.stats()
    finally:
        tracer.close(timeout=10)
    assert stats["emitted"] == len(sent) == stats["sent"] + stats["dropped_total"]
    assert stats["dropped_total"] == 0, stats["dropped"]  # nothing had to be given up
    refusals = stats["refused"].get("disk_full", 0)
    assert refusals >= 1, stats  # it did meet the full disk, then stayed with the healthy one
    metrics = requests.get(full.url + "/metrics", timeout=5).text
    assert f'tracehook_collector_rejected_total{{reason="disk_full"}} {refusals}' in metrics
    assert full.stop() == 0 and healthy.stop() == 0
    assert not (full_disk / "log").exists()
    records = assert_log_is_clean(str(tmp_path / "healthy" / "log"))
    delivered = [e.msg_id for r in records for e in wire.decode_batch(r.payload).events]
    assert sorted(delivered) == sorted(sent)  # every event acknowledged through the other, once
