"""The collector's optional C extensions, and the one switch that turns them all off.

Each extension in :data:`EXTENSIONS` (built by ``setup.py``) speeds up work that a Python path
also does, byte for byte; every loader imports its extension through :func:`load`, which gives None
when the extension is not built or is switched off, and the Python path runs::

    from collector import extensions

    _rowbuild = extensions.load("collector.store._rowbuild")   # None: build rows in Python

``TRACEHOOK_NO_EXTENSIONS=1`` (:data:`ENV_NO_EXTENSIONS`) in the environment turns every extension
off at import; at install (``TRACEHOOK_NO_EXTENSIONS=1 pip install ...``) ``setup.py`` then builds
none. The older per-extension switches (:data:`OWN_SWITCHES`) still turn off their one extension.
To see which paths are in use: ``validate.FAST_PATH``, ``rowbuild.FAST_PATH``, ``readback.FAST_PATH``,
and ``local.SQLPUT`` (docs/index-store.md).
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from types import ModuleType

ENV_NO_EXTENSIONS = "TRACEHOOK_NO_EXTENSIONS"
"""Set to ``1`` to use no compiled extension (at import; at install, to build none). ``setup.py``
spells the same name (it cannot import the package it builds; tests/collector/test_extensions.py
checks the two agree)."""

ENV_PYTHON_ROWS = "TRACEHOOK_PYTHON_ROWS"
"""Set to ``1`` to build index rows in Python even when ``collector.store._rowbuild`` is built."""

ENV_PYTHON_PUTS = "TRACEHOOK_PYTHON_PUTS"
"""Set to ``1`` to write and read the embedded store through Python's sqlite3 even when
``collector.store._sqlput`` is built."""

EXTENSIONS = (
    "collector.wirecheck._wirecheck",  # the batch validator: collector.wirecheck.validate
    "collector.store._rowbuild",  # index rows: collector.index.rowbuild
    "collector.store._readback",  # the rollups' read-back: collector.index.readback
    "collector.store._sqlput",  # the embedded store's puts and reads: collector.store.local
)
"""Every compiled module ``setup.py`` builds (tests/collector/test_extensions.py checks the two lists agree)."""

OWN_SWITCHES: Mapping[str, str] = {
    "collector.store._rowbuild": ENV_PYTHON_ROWS,
    "collector.store._sqlput": ENV_PYTHON_PUTS,
}
"""The extensions that also have a switch of their own (kept from earlier releases)."""

_OFF_VALUES = ("", "0")
_log = logging.getLogger(__name__)


def _switched_on(env: Mapping[str, str], name: str) -> bool:
    value = env.get(name, "")
    if value == "1":
        return True
    if value not in _OFF_VALUES:  # as for every other setting: a bad environment value is logged and ignored
        _log.warning("%s=%r is neither 1 nor 0; extensions stay on", name, value)
    return False


def disabled(module: str, env: Mapping[str, str] | None = None) -> bool:
    """True when ``module`` (one of :data:`EXTENSIONS`) is switched off by the environment:
    :data:`ENV_NO_EXTENSIONS` or the module's own switch (:data:`OWN_SWITCHES`) set to ``1``."""
    env = os.environ if env is None else env
    if _switched_on(env, ENV_NO_EXTENSIONS):
        return True
    own = OWN_SWITCHES.get(module)
    return own is not None and _switched_on(env, own)


def load(module: str) -> ModuleType | None:
    """The compiled ``module`` (one of :data:`EXTENSIONS`), or None when it is switched off
    (:func:`disabled`) or not built (no compiler at install, or ``TRACEHOOK_NO_EXTENSIONS=1`` then)."""
    if module not in EXTENSIONS:
        raise ValueError(f"module {module!r} is not one of collector.extensions.EXTENSIONS")
    if disabled(module):
        return None
    try:
        return importlib.import_module(module)
    except ImportError:  # not built
        return None
