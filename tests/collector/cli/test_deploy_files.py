"""``tracehook deploy-files``: deploy/'s files, the units' venv set, existing files kept unless --force.

The wheel's copy of deploy/ is checked by tests/deploy/test_installed.py; here the command reads
the checkout's.
"""

from __future__ import annotations

import pathlib
import stat
import sys

import pytest

from collector.cli import deploy_files
from collector.cli.main import main

ROOT = pathlib.Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"


def _tree(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_writes_deploy_dir_with_the_venv_and_keeps_existing_files_unless_forced(tmp_path: pathlib.Path,
                                                                                capsys: pytest.CaptureFixture[str]
                                                                                ) -> None:
    out = tmp_path / "out"
    assert main(["deploy-files", str(out), "--venv", "/srv/th/venv"]) == 0
    source, written = _tree(DEPLOY), _tree(out)
    assert sorted(written) == sorted(source) and {"systemd/tracehook-index.service", "grafana/tracehook.json"} <= set(written)
    for name, text in written.items():  # only the units differ, and only in the venv path
        assert text.replace("/srv/th/venv", deploy_files.DEFAULT_VENV) == source[name], name
    for unit in ("tracehook-collector.service", "tracehook-index.service"):
        assert "ExecStart=/srv/th/venv/bin/tracehook " in written[f"systemd/{unit}"]
    assert stat.S_IMODE((out / "systemd" / "tracehook.env").stat().st_mode) == 0o600  # it will hold tokens
    assert stat.S_IMODE((out / "systemd" / "collector.toml").stat().st_mode) == 0o644
    assert "wrote 7 files" in capsys.readouterr().out

    (out / "systemd" / "tracehook.env").write_text("TRACEHOOK_COLLECTOR_INGEST_TOKEN=real\n")
    assert main(["deploy-files", str(out)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert (out / "systemd" / "tracehook.env").read_text() == "TRACEHOOK_COLLECTOR_INGEST_TOKEN=real\n"
    assert main(["deploy-files", str(out), "--force"]) == 0  # the default venv: this one's, else /opt's
    expected = sys.prefix if sys.prefix != sys.base_prefix else deploy_files.DEFAULT_VENV
    assert f"ExecStart={expected}/bin/tracehook " in (out / "systemd" / "tracehook-collector.service").read_text()
    assert _tree(out)["systemd/tracehook.env"] == source["systemd/tracehook.env"]
