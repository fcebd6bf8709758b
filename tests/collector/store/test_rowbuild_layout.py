"""The C row builder and the Python definitions agree on every layout constant, not just on drawn cases.

``collector/store/_rowbuild.c`` reports every constant compiled into it (``_rowbuild.layout()``:
field positions and kinds, key tags, hash sizes, event types, table slots, ...);
:func:`collector.index.rowbuild.python_layout` computes each from schema.py, keys.py and wire.py.
Fails, never skips, when the extension is not built.
"""

from __future__ import annotations

import logging

import pytest

from collector.index import rowbuild
from collector.store import codec, schema

try:
    from collector.store import _rowbuild
except ImportError:  # reported by the test below
    _rowbuild = None


def test_every_compiled_constant_is_the_python_definition() -> None:
    assert _rowbuild is not None, "collector.store._rowbuild is not built: python3 setup.py build_ext --inplace"
    compiled, defined = _rowbuild.layout(), rowbuild.python_layout()
    assert sorted(compiled) == sorted(defined)
    for name in defined:
        assert compiled[name] == defined[name], name
    assert rowbuild.FAST_PATH or rowbuild.extensions.disabled("collector.store._rowbuild")


@pytest.mark.parametrize(("module", "name", "value", "constant"), [
    (schema, "KEY_SEPARATOR", ",", "key_separator"),
    (codec, "_HEX_FIELDS", (4, 5, 19, 23), "hex_fields"),
])
def test_a_changed_python_definition_turns_the_extension_off(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, module: object, name: str,
        value: object, constant: str) -> None:
    assert _rowbuild is not None
    monkeypatch.setattr(module, name, value)
    monkeypatch.delenv(rowbuild.extensions.ENV_NO_EXTENSIONS, raising=False)
    monkeypatch.delenv(rowbuild.ENV_PYTHON_ROWS, raising=False)
    with caplog.at_level(logging.WARNING, logger=rowbuild.__name__):
        assert rowbuild._load() is None
    assert f"differ from the Python definitions: {constant}" in caplog.text
