"""Builds the optional C extensions; everything else is in pyproject.toml.

All four are optional: without a compiler the install still succeeds and the Python paths run.
``collector.wirecheck._wirecheck`` validates batches (else :mod:`collector.wirecheck.validate` validates
in Python: ``validate.FAST_PATH`` is False); ``collector.store._rowbuild`` builds index rows (else
:func:`collector.index.indexer.batched_rows` builds them in Python: ``rowbuild.FAST_PATH`` is False);
``collector.store._readback`` decodes the rollup read-back's events (else :mod:`collector.index.readback`
does it with msgspec: ``readback.FAST_PATH`` is False); ``collector.store._sqlput`` runs the embedded store's puts
and multi-row reads with the GIL released (it also needs sqlite3.h; else Python's ``executemany`` and
``IN`` lookups do: ``local.SQLPUT`` is False).

``TRACEHOOK_NO_EXTENSIONS=1`` in the environment builds none of them (``TRACEHOOK_NO_EXTENSIONS=1 pip install
tracehook``: an app that needs only the hooks and msgpack compiles nothing); at import the same variable turns
every built one off (:mod:`collector.extensions`, which also lists them).

The wheel also carries ``deploy/`` (the systemd units, their config, the Prometheus rules, the Grafana
dashboard) as ``collector/deploy_files/``, which ``tracehook deploy-files`` writes out; MANIFEST.in puts
``deploy/`` in the sdist so that a wheel built from it has them too.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

DEPLOY_DIR = "deploy"
PACKAGED_DEPLOY_DIR = os.path.join("collector", "deploy_files")  # collector.cli.deploy_files.PACKAGED_DIR
ENV_NO_EXTENSIONS = "TRACEHOOK_NO_EXTENSIONS"  # collector.extensions.ENV_NO_EXTENSIONS


class BuildPyWithDeployFiles(build_py):
    """build_py, plus ``deploy/`` copied into the built collector package (not in an editable install:
    there ``tracehook deploy-files`` reads the checkout's ``deploy/``)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self.copy_tree(DEPLOY_DIR, os.path.join(self.build_lib, PACKAGED_DEPLOY_DIR))


C_INCLUDE = "collector/_c"  # headers the extensions share: msgpack_rw.h (msgpack read and written)
MSGPACK_RW = f"{C_INCLUDE}/msgpack_rw.h"

EXTENSIONS = [  # collector.extensions.EXTENSIONS
    Extension("collector.wirecheck._wirecheck", sources=["collector/wirecheck/_wirecheck.c"],
              include_dirs=[C_INCLUDE], depends=[MSGPACK_RW], optional=True),
    Extension("collector.store._rowbuild", sources=["collector/store/_rowbuild.c"], include_dirs=[C_INCLUDE],
              depends=[MSGPACK_RW, "collector/store/_blake2b.h"], optional=True),
    Extension("collector.store._readback", sources=["collector/store/_readback.c"], include_dirs=[C_INCLUDE],
              depends=[MSGPACK_RW, "collector/store/_blake2b.h", "collector/store/_partof.h"], optional=True),
    Extension("collector.store._sqlput", sources=["collector/store/_sqlput.c"], libraries=["sqlite3"], optional=True),
]

setup(cmdclass={"build_py": BuildPyWithDeployFiles},
      ext_modules=[] if os.environ.get(ENV_NO_EXTENSIONS, "") == "1" else EXTENSIONS)
