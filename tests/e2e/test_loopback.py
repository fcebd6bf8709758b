"""The services the scripts start listen on loopback only, and ``stop`` leaves nothing running.

Sockets are read from ``/proc/net/tcp{,6}`` and matched to processes through
``/proc/PID/fd``: every process under a pid file in ``.run/<service>/`` (and its
descendants) counts as the service's, so other worktrees' services are left out.
"""

from __future__ import annotations

import ipaddress
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_LISTEN = "0A"


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(name))
    return tree


def service_pids(run_dir: pathlib.Path) -> set[int]:
    """Processes started from ``run_dir``'s pid files, with all their descendants, still alive."""
    roots = []
    for pid_file in run_dir.rglob("*.pid"):
        text = pid_file.read_text().strip()
        if text.isdigit():
            roots.append(int(text))
    tree, found = _children(), set()
    while roots:
        pid = roots.pop()
        if pid not in found and os.path.exists(f"/proc/{pid}"):
            found.add(pid)
            roots += tree.get(pid, [])
    return found


def _address(hex_addr: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    # /proc/net/tcp{,6} print each 32-bit word in host (little-endian) order.
    fixed = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(fixed), int(port, 16)


def listening_sockets(pids: set[int]) -> list[tuple[int, str, str, int]]:
    """``(pid, command, address, port)`` of every TCP socket in LISTEN state owned by ``pids``."""
    inodes: dict[str, tuple[int, str]] = {}
    for pid in pids:
        try:
            comm = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[target[8:-1]] = (pid, comm)
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in pathlib.Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == _LISTEN and fields[9] in inodes:
                address, port = _address(fields[1])
                pid, comm = inodes[fields[9]]
                found.append((pid, comm, str(address), port))
    return found


def is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def test_proc_net_parsing_reads_this_process_socket():
    """The parser itself: a socket bound here on 127.0.0.1 shows as loopback, with its port."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        found = listening_sockets({os.getpid()})
    assert (os.getpid(), pathlib.Path("/proc/self/comm").read_text().strip(), "127.0.0.1", port) in found
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and is_loopback("::ffff:127.0.0.1")


@pytest.mark.rabbitmq
@pytest.mark.kafka
@pytest.mark.hbase
def test_every_service_port_is_on_loopback(rabbitmq_url, kafka_bootstrap, hbase_port):
    """RabbitMQ (AMQP, Erlang distribution, epmd), Kafka and HBase: no socket on a public address."""
    sockets = {name: listening_sockets(service_pids(ROOT / ".run" / name)) for name in ("rabbitmq", "kafka", "hbase")}
    for name, found in sockets.items():
        assert found, f"no listening socket found for {name}: are its pid files under .run/{name}?"
    exposed = [(name, *s) for name, found in sockets.items() for s in found if not is_loopback(s[2])]
    assert not exposed, f"listening beyond loopback: {exposed}"
    rabbit = {comm for _, comm, _, _ in sockets["rabbitmq"]}
    assert {"beam.smp", "epmd"} <= rabbit, sockets["rabbitmq"]  # the distribution port and our own epmd


@pytest.mark.rabbitmq
@pytest.mark.slow
def test_rabbitmq_stop_leaves_no_process(tmp_path):
    """A private node (its own run dir): after ``stop`` neither the node nor its epmd is running."""
    env = dict(os.environ, RABBITMQ_RUN_DIR=str(tmp_path / "rabbitmq"))
    script = str(ROOT / "scripts" / "rabbitmq")
    started = subprocess.run([script, "start"], env=env, capture_output=True, text=True, timeout=300)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        pids = service_pids(tmp_path / "rabbitmq")
        comms = {pathlib.Path(f"/proc/{p}/comm").read_text().strip() for p in pids}
        assert {"beam.smp", "epmd"} <= comms, comms
    finally:
        stopped = subprocess.run([script, "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    alive = [p for p in pids if os.path.exists(f"/proc/{p}") and "Z" not in _state(p)]
    assert not alive, f"still running after stop: {alive}"


def _state(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
