"""The install steps of docs/deploy.md ("Running as a service"), end to end, as an operator runs them.

``python -m build`` makes the wheel; a fresh venv of Debian's python3 (not the checkout, not
editable) installs it with ``[collector,index]``; the installed ``tracehook deploy-files`` writes
the units. Their copies get the data directory and /etc/tracehook moved into a temporary
directory (the venv path needs no edit: deploy-files wrote this venv's), then both units'
``ExecStart=`` lines run as systemd would: with only ``PATH=/usr/bin:/bin``, the user's
``HOME``/``USER``/``LOGNAME``/``SHELL``, the units' ``Environment=`` and ``EnvironmentFile=``,
in ``WorkingDirectory=``, as a dedicated non-root user. A batch goes in with the ingest token,
the index unit's job indexes it, the installed ``tracehook query`` finds it with the query
token, and SIGTERM stops both with exit 0. This is how the index job's Python workers once ran
``python3`` from PATH, the system interpreter without tracehook, and failed.

Needs root (useradd, setpriv) and the package index (the build backend, the extras; pip's cache
makes it quick). About two and a half minutes: the build, the install and the Spark job's start.
"""

from __future__ import annotations

import functools
import os
import pathlib
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import pytest
import requests
from fixtures import systemd_units
from fixtures.ports import free_port

from tracehook.wire import BatchHeader, EventType, encode_batch, make_event

ROOT = pathlib.Path(__file__).resolve().parents[2]
BASE_PYTHON = "/usr/bin/python3"
"""Debian's interpreter: the venv's must be readable by the service user (a pyenv under /root is not)."""
SYSTEM_PATH = "/usr/bin:/bin"
"""PATH as the units get it here: nothing of the venv on it."""
TEST_USER = "tracehook-test"
UNITS = ("tracehook-collector.service", "tracehook-index.service")
DATA_DIR, CONFIG_DIR = "/var/lib/tracehook", "/etc/tracehook"
"""What the copies of the units and their config move into the temporary directory."""
INDEX_TIMEOUT_S = 240.0  # a hang guard: the Spark JVM's start and first batch take most of it on 2 busy cores
STOP_TIMEOUT_S = 60.0  # the index unit's TimeoutStopSec=


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def _test_user() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(TEST_USER)
    except KeyError:
        _run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
              "--shell", "/usr/sbin/nologin", TEST_USER])
        return pwd.getpwnam(TEST_USER)


@pytest.fixture
def workdir() -> Iterator[pathlib.Path]:
    """A 0755 directory outside pytest's tmp_path (/tmp/pytest-of-root is 0700: the service user could not reach it)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="tracehook-installed-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _umask_022() -> None:
    os.umask(0o022)  # the venv readable by the service user whatever the runner's umask


def _move_paths(path: pathlib.Path, work: pathlib.Path) -> None:
    """The data directory and /etc/tracehook moved into ``work`` in one copied file."""
    text = path.read_text().replace(DATA_DIR, str(work / "data")).replace(CONFIG_DIR, str(work / "etc"))
    path.write_text(text)


def _set(env_text: str, key: str, value: str) -> str:
    """``key=value`` in an env file's text, replacing the example's line (or added at the end)."""
    line = f"{key}={value}"
    text, found = re.subn(rf"(?m)^{key}=.*$", line, env_text)
    return text if found else text + line + "\n"


class Unit:
    """A unit's ``ExecStart=`` as systemd runs it: its environment, user and working directory."""

    def __init__(self, path: pathlib.Path, user: pwd.struct_passwd, logs: pathlib.Path) -> None:
        service = systemd_units.service(path)
        env_file = service["EnvironmentFile"].removeprefix("-")
        unit_env = systemd_units.unit_environment(path, env_file)
        self.argv = systemd_units.exec_argv(path, unit_env)
        # systemd's User= sets HOME, USER, LOGNAME and SHELL from the user's entry; nothing else is inherited.
        self.env = {"PATH": SYSTEM_PATH, "HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name,
                    "SHELL": user.pw_shell, **unit_env}
        self.cwd = service["WorkingDirectory"]
        self.user = user
        self.log = logs / f"{path.stem}.out"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        setpriv = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups", "--"]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([*setpriv, *self.argv], env=self.env, cwd=self.cwd, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM to the main process (the index unit's KillMode=mixed; the collector has no children)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


def _wait_for(what: str, check: Callable[[], bool], timeout: float, units: list[Unit]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        for unit in units:
            assert unit.proc is not None and unit.proc.poll() is None, (
                f"{unit.log.name} exited {unit.proc.returncode if unit.proc else None} before {what}:\n"
                f"{unit.output()[-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"no {what} in {timeout:.0f}s:\n" + "\n".join(u.output()[-3000:] for u in units))


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_the_wheel_in_a_fresh_venv_runs_both_units_as_their_user(workdir: pathlib.Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("needs root: it adds the user tracehook-test and runs the units as it with setpriv "
                    "(deselect with -m 'not slow')", pytrace=False)
    assert shutil.which("java", path=SYSTEM_PATH), (
        f"no java on {SYSTEM_PATH}: the index unit would not find it (set JAVA_HOME in tracehook.env)")
    user = _test_user()
    timings: dict[str, float] = {}
    started = time.monotonic()

    # The operator's steps (docs/deploy.md): build, a fresh venv, the wheel with its extras, deploy-files.
    _run([sys.executable, "-m", "build", "--outdir", str(workdir / "dist"), str(ROOT)])
    (wheel,) = (workdir / "dist").glob("tracehook-*.whl")
    timings["build"] = time.monotonic() - started
    venv = workdir / "venv"
    # As the operator's shell: the checkout's PYTHONPATH would show pip a tracehook "already installed".
    operator = {"PATH": SYSTEM_PATH, "HOME": os.environ.get("HOME", "/root")}  # HOME: pip's cache
    _run([BASE_PYTHON, "-m", "venv", str(venv)], preexec_fn=_umask_022, env=operator)
    _run([str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "--quiet", f"{wheel}[collector,index]"],
         preexec_fn=_umask_022, env=operator)
    timings["install"] = time.monotonic() - started - timings["build"]
    done = _run([str(venv / "bin" / "python"), "-c", "import collector; print(collector.__file__)"], cwd="/",
                env=operator)
    assert done.stdout.startswith(str(venv)), done.stdout  # the wheel's copy, not the checkout's
    deployed = workdir / "deploy"
    done = _run([str(venv / "bin" / "tracehook"), "deploy-files", str(deployed)], env=operator)
    assert f"the units run {venv}/bin/tracehook" in done.stdout
    assert not (set(os.listdir(deployed / "systemd")) ^ set(os.listdir(ROOT / "deploy" / "systemd")))

    # The copies moved into the work dir; the env file with real tokens (change-me... is refused) and a free port.
    for name in os.listdir(deployed / "systemd"):
        _move_paths(deployed / "systemd" / name, workdir)
    etc, data, logs = workdir / "etc", workdir / "data", workdir / "logs"
    etc.mkdir(mode=0o755)
    logs.mkdir()
    data.mkdir(mode=0o750)  # StateDirectory=tracehook, StateDirectoryMode=0750
    os.chown(data, user.pw_uid, user.pw_gid)
    shutil.copy(deployed / "systemd" / "collector.toml", etc / "collector.toml")
    ingest_token, query_token, port = f"ingest-{secrets.token_hex(8)}", f"query-{secrets.token_hex(8)}", free_port()
    env_text = (deployed / "systemd" / "tracehook.env").read_text()
    for key, value in (("TRACEHOOK_COLLECTOR_INGEST_TOKEN", ingest_token),
                       ("TRACEHOOK_COLLECTOR_QUERY_TOKEN", query_token), ("TRACEHOOK_COLLECTOR_PORT", str(port))):
        env_text = _set(env_text, key, value)
    (etc / "tracehook.env").write_text(env_text)
    os.chown(etc / "tracehook.env", 0, user.pw_gid)  # mode 0640, owner root, group of the service user
    (etc / "tracehook.env").chmod(0o640)

    collector, index = units = [Unit(deployed / "systemd" / name, user, logs) for name in UNITS]
    assert collector.argv[0] == index.argv[0] == str(venv / "bin" / "tracehook")
    url = f"http://127.0.0.1:{port}"
    try:
        index.start()  # first, as systemd may: it waits for the collector's trace log
        collector.start()
        _wait_for("/healthz", functools.partial(_answers, url + "/healthz"), 60, units)

        msg_id = f"installed-{secrets.token_hex(6)}"
        now = int(time.time() * 1000)
        body = encode_batch(BatchHeader("installed-client", 1, "shop", "web-1", now, {}),
                            [make_event(EventType.PUB, now, "", "orders", msg_id, keys="customer-1")])
        headers = {"Content-Type": "application/msgpack"}
        assert requests.post(url + "/v1/batches", data=body, headers=headers, timeout=10).status_code == 401
        answer = requests.post(url + "/v1/batches", data=body, timeout=10,
                               headers={**headers, "Authorization": f"Bearer {ingest_token}"})
        assert answer.status_code == 200, answer.text
        sent = time.monotonic()

        found = functools.partial(_answers, f"{url}/v1/messages/{msg_id}", query_token)
        _wait_for(f"{msg_id} in the index", found, INDEX_TIMEOUT_S, units)
        timings["indexed"] = time.monotonic() - sent
        done = _run([str(venv / "bin" / "tracehook"), "query", "--collector", url, "--token", query_token, "--json",
                     "id", msg_id], env=operator)
        assert msg_id in done.stdout and "customer-1" in done.stdout

        codes = {u.log.name: u.stop() for u in (index, collector)}
    finally:
        for unit in units:
            unit.kill()
    out = {u.log.name: u.output() for u in units}
    assert codes == {"tracehook-index.out": 0, "tracehook-collector.out": 0}, out
    assert "stopped by SIGTERM" in out["tracehook-index.out"]
    assert not [name for name, text in out.items() if "Traceback" in text or "ModuleNotFoundError" in text], out
    for path in (data / "log", data / "index.sqlite3"):  # written by the service user, under its data dir
        assert path.stat().st_uid == user.pw_uid, path
    timings["total"] = time.monotonic() - started
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()})


def _answers(url: str, token: str | None = None) -> bool:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return requests.get(url, headers=headers, timeout=2).status_code == 200
    except requests.RequestException:
        return False
