"""Coverage-guided fuzzing of the C batch validator (collector.wirecheck._wirecheck) with atheris.

Run through ``scripts/fuzz``, which builds the extension with AddressSanitizer,
UndefinedBehaviorSanitizer and libFuzzer's coverage instrumentation into build/fuzz/,
preloads the ASan runtime and starts this file::

    scripts/fuzz 60                      # one minute, seeded from tests/fuzz/corpus/

Every input goes through both paths of :func:`collector.wirecheck.validate.check_batch`: the C walk and
the Python validator, which defines the format. They must agree: the C path accepts exactly
the batches the Python path accepts, with the same header and event count; for a rejected
body :func:`collector.wirecheck.validate.check_batch` (C first, then Python for the reason) must raise the
same :class:`~tracehook.wire.WireError` reason as the Python path alone. A disagreement
raises :class:`Disagreement`, which atheris reports as a crash and saves the input.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Load the instrumented build as collector.wirecheck._wirecheck before the validator imports it, so
# validate.FAST_PATH and validate.check_batch use the sanitized code, never an in-place .so.
_SO = os.environ.get("WIRECHECK_FUZZ_SO")
if not _SO:
    sys.exit("WIRECHECK_FUZZ_SO is not set: run scripts/fuzz, which builds the instrumented extension")

import atheris  # noqa: E402

with atheris.instrument_imports(include=["tracehook.wire", "collector.wirecheck.validate"]):
    _spec = importlib.util.spec_from_file_location("collector.wirecheck._wirecheck", _SO)
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["collector.wirecheck._wirecheck"] = _module
    _spec.loader.exec_module(_module)
    from collector.wirecheck import validate  # noqa: E402
    from tracehook import wire  # noqa: E402

if not validate.FAST_PATH or validate._fast_check is not _module.check:
    sys.exit(f"collector.wirecheck.validate is not using the instrumented extension at {_SO}")


class Disagreement(AssertionError):
    """The C and Python paths of check_batch gave different answers for one input."""


def _python_verdict(data: bytes) -> tuple[str, object]:
    try:
        header, count = wire.check_batch(data)
    except wire.WireError as exc:
        return "reject", exc.reason
    return "accept", (header, count)


def check_one(data: bytes) -> None:
    """Compare the two paths on one body; raise :class:`Disagreement` if they differ."""
    expected = _python_verdict(data)
    fast = validate.fast_check_batch(data)
    if fast is not None and expected != ("accept", fast):
        raise Disagreement(f"C accepts {fast!r}, Python says {expected!r}")
    if fast is None:
        if expected[0] == "accept":
            raise Disagreement(f"C rejects a batch Python accepts: {expected[1]!r}")
        try:
            validate.check_batch(data)
        except wire.WireError as exc:
            if exc.reason != expected[1]:
                raise Disagreement(f"check_batch says {exc.reason}, Python alone {expected[1]}") from None
        else:
            raise Disagreement("check_batch accepts what the Python path rejects")


def main(argv: list[str]) -> None:
    atheris.Setup(argv, check_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
