"""``tracehook deploy-files DIR``: write the systemd units and config examples that ship with the package.

An operator who installed the wheel needs no checkout: this writes ``deploy/``'s files
(docs/deploy.md) into ``DIR/systemd``, ``DIR/prometheus`` and ``DIR/grafana``, with the units'
``ExecStart=`` naming the venv this command runs from (``--venv`` names another)::

    /opt/tracehook/venv/bin/tracehook deploy-files /tmp/tracehook-deploy
    tracehook deploy-files ./units --venv /srv/tracehook/venv --force

An existing file is not overwritten unless ``--force``: one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import collector
from collector.cli.errors import EXIT_ERROR, DeployFilesError

DEFAULT_VENV = "/opt/tracehook/venv"
"""The venv the units in ``deploy/systemd`` run (``ExecStart=/opt/tracehook/venv/bin/tracehook ...``)."""
PACKAGED_DIR = "deploy_files"
"""Where the wheel holds ``deploy/`` inside the collector package (setup.py copies it there)."""
SECRET_FILES = frozenset({"tracehook.env"})
"""Files that will hold tokens: written mode 0600, not 0644."""


def source_dir() -> pathlib.Path:
    """The installed copy of ``deploy/``, or the checkout's own when running from one."""
    package = pathlib.Path(collector.__file__).resolve().parent
    for candidate in (package / PACKAGED_DIR, package.parent / "deploy"):
        if (candidate / "systemd").is_dir():
            return candidate
    raise DeployFilesError(f"no deploy files in {package / PACKAGED_DIR}: reinstall tracehook from its wheel")


def default_venv() -> str:
    """The venv running this command (its units then run this very ``tracehook``), else :data:`DEFAULT_VENV`."""
    return sys.prefix if sys.prefix != sys.base_prefix else DEFAULT_VENV


def deploy_files(target: str | os.PathLike[str], venv: str, force: bool = False) -> list[pathlib.Path]:
    """Write every deploy file under ``target`` with the units' venv set to ``venv``; returns the paths written.

    Raises :class:`DeployFilesError` before writing anything if a file exists and not ``force``.
    """
    source = source_dir()
    files = sorted(p.relative_to(source) for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    out = pathlib.Path(target)
    existing = [str(out / f) for f in files if (out / f).exists()]
    if existing and not force:
        raise DeployFilesError(f"{existing[0]} exists{f' (and {len(existing) - 1} more)' if len(existing) > 1 else ''}; "
                               "pass --force to overwrite")
    written = []
    for rel in files:
        text = (source / rel).read_text()
        if rel.suffix == ".service":
            text = text.replace(DEFAULT_VENV, venv)
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o600 if rel.name in SECRET_FILES else 0o644)
        written.append(path)
    return written


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tracehook deploy-files``."""
    parser.add_argument("dir", metavar="DIR", help="where to write systemd/, prometheus/ and grafana/ (created if missing)")
    parser.add_argument("--venv", default=None, metavar="VENV",
                        help="the venv the units' ExecStart= runs, VENV/bin/tracehook "
                             f"(default: the one running this command, else {DEFAULT_VENV})")
    parser.add_argument("--force", action="store_true", help="overwrite files that exist")


def run(args: argparse.Namespace) -> int:
    """Write the files; exit 0, or 2 with one line (a file exists, DIR cannot be written)."""
    venv = os.path.abspath(args.venv or default_venv())  # systemd wants an absolute ExecStart= path
    try:
        written = deploy_files(args.dir, venv, force=args.force)
    except (DeployFilesError, OSError) as exc:
        print(f"deploy-files: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(f"deploy-files: wrote {len(written)} files to {args.dir}; the units run {venv}/bin/tracehook")
    return 0
