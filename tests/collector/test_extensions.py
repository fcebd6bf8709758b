"""One switch turns every compiled extension off: at import (each loader) and at install (setup.py)."""

from __future__ import annotations

import json
import os
import pathlib
import runpy
import subprocess
import sys
import tomllib
from typing import Any

import pytest
import setuptools

from collector import extensions

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Each loader's own report of whether its extension is in use, read in a fresh interpreter.
REPORT = """
import json
from collector.index import readback, rowbuild
from collector.store import local
from collector.wirecheck import validate
print(json.dumps({
    "collector.wirecheck._wirecheck": validate.FAST_PATH,
    "collector.store._rowbuild": rowbuild.FAST_PATH,
    "collector.store._readback": readback.FAST_PATH,
    "collector.store._sqlput": local.SQLPUT,
}))
"""


def _reports(*envs: dict[str, str]) -> list[dict[str, bool]]:
    """The report under each of ``envs`` (on top of this environment without any switch), in parallel."""
    clean = {k: v for k, v in os.environ.items()
             if k not in (extensions.ENV_NO_EXTENSIONS, *extensions.OWN_SWITCHES.values())}
    runs = [subprocess.Popen([sys.executable, "-c", REPORT], env={**clean, **env, "PYTHONPATH": str(ROOT)},
                             stdout=subprocess.PIPE, text=True, cwd=ROOT) for env in envs]
    outs = [run.communicate(timeout=60)[0] for run in runs]
    assert [run.returncode for run in runs] == [0] * len(runs)
    return [json.loads(out) for out in outs]


def test_the_switch_turns_every_extension_off_and_the_older_switches_their_one() -> None:
    own = list(extensions.OWN_SWITCHES.items())
    plain, switched, *one_off = _reports({}, {extensions.ENV_NO_EXTENSIONS: "1"}, *({env: "1"} for _, env in own))
    assert plain == dict.fromkeys(extensions.EXTENSIONS, True), "build them: python3 setup.py build_ext --inplace"
    assert switched == dict.fromkeys(extensions.EXTENSIONS, False)
    for (module, env), report in zip(own, one_off):
        assert report == {m: m != module for m in extensions.EXTENSIONS}, env


@pytest.mark.parametrize(("value", "off"), [("1", True), ("0", False), ("", False), ("yes", False)])
def test_only_1_switches_off(value: str, off: bool, caplog: pytest.LogCaptureFixture) -> None:
    env = {extensions.ENV_NO_EXTENSIONS: value}
    assert all(extensions.disabled(m, env) is off for m in extensions.EXTENSIONS)
    assert ("neither 1 nor 0" in caplog.text) is (value == "yes")


def test_load_refuses_a_module_that_is_not_an_extension() -> None:
    with pytest.raises(ValueError, match="not one of"):
        extensions.load("collector.store.schema")


def _setup_kwargs(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    captured: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.delenv(extensions.ENV_NO_EXTENSIONS, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    return captured


def test_setup_builds_every_extension_and_none_with_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _setup_kwargs(monkeypatch)["ext_modules"]
    assert [e.name for e in built] == list(extensions.EXTENSIONS)
    assert all(e.optional for e in built)
    assert _setup_kwargs(monkeypatch, **{extensions.ENV_NO_EXTENSIONS: "1"})["ext_modules"] == []
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "collector").rglob("*.c")}
    assert sources == {s for e in built for s in e.sources}  # every C file is one of them


def test_ci_runs_the_readme_command_then_the_fallback_pass() -> None:
    readme = (ROOT / "README.md").read_text()
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pytest" in line]
    assert f"bash scripts/setup --all && {commands[0]}\n" in readme
    assert commands[1:] == [f'{extensions.ENV_NO_EXTENSIONS}=1 python3 -m pytest -m "fallback and not hbase"']
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("fallback:") for m in markers)
