"""Set-up from a fresh clone: the build prints no setuptools warnings, and scripts/setup stops with one
clear line when a prerequisite is missing and it cannot install it."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_setup_names_a_missing_java_and_the_command_to_get_it(tmp_path):
    """No java and no apt-get on PATH: one line naming Java 17 and the apt-get command; pip never runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "id", "dirname", "sed", "head"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "python3").symlink_to(sys.executable)
    # Should the script ever get past its checks, pip must not touch the machine's install.
    guard = {"PIP_DRY_RUN": "1", "PIP_NO_INDEX": "1"}
    done = subprocess.run([str(bin_dir / "bash"), str(ROOT / "scripts" / "setup")], capture_output=True, text=True,
                          timeout=60, env={"PATH": str(bin_dir), "HOME": str(tmp_path), **guard})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert "Java 17" in done.stderr and "apt-get install openjdk-17-jre-headless" in done.stderr
    assert "Python packages" not in done.stdout  # stopped before installing anything


@pytest.mark.slow
def test_building_the_package_prints_no_setuptools_warning(tmp_path):
    """pip builds a wheel as `pip install` does (isolated build env, the C extension included)."""
    files = subprocess.run(["git", "ls-files", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "tracehook",
                            "collector", "spark_jobs", "deploy"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    src = tmp_path / "src"
    for name in files:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(tmp_path / "wheel"),
                           str(src)], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PIP_ROOT_USER_ACTION="ignore", PIP_DISABLE_PIP_VERSION_CHECK="1"))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "BuildBackendWarning" not in out and "DeprecationWarning" not in out, out
    assert "_wirecheck" in out  # the optional extension is still built
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as packed:  # deploy/ inside, for `tracehook deploy-files`
        assert "collector/deploy_files/systemd/tracehook-index.service" in packed.namelist()
