"""The C validator under a coverage-guided fuzzer with ASan and UBSan (scripts/fuzz).

Ten seconds of atheris over tests/fuzz/corpus/ in the suite (``scripts/fuzz SECONDS`` runs
longer by hand): every input must get the same answer from
the C and Python paths of check_batch, and no sanitizer may report anything. Inputs the
fuzzer finds are kept in build/fuzz/corpus/ (git-ignored), so runs build on each other.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
FUZZ_SECONDS = 10


def _load_make_corpus():
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "tests" / "fuzz" / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_seed_corpus_is_current() -> None:
    # The committed seeds are what make_corpus.py writes from today's wire format.
    seeds = _load_make_corpus().seeds()
    committed = {p.name.rsplit("-", 1)[0]: p.read_bytes() for p in CORPUS.iterdir()}
    assert committed == seeds, "rerun tests/fuzz/make_corpus.py and commit tests/fuzz/corpus/"


@pytest.mark.slow
def test_a_fuzz_run_finds_nothing() -> None:
    if shutil.which("clang") is None or importlib.util.find_spec("atheris") is None:
        # Failing, not skipping: a skipped fuzz run in CI would look like a clean one.
        pytest.fail("scripts/fuzz needs clang (apt-get install clang libclang-rt-14-dev) and atheris (pip): "
                    "run scripts/setup --all", pytrace=False)
    proc = subprocess.run(
        [str(ROOT / "scripts" / "fuzz"), str(FUZZ_SECONDS)], cwd=ROOT, capture_output=True, text=True,
        timeout=FUZZ_SECONDS + 300,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode == 2 and output.startswith("scripts/fuzz: "):  # a tool it needs is missing
        pytest.fail(output.strip().splitlines()[0], pytrace=False)
    tail = "\n".join(line for line in output.splitlines() if "Instrumenting" not in line)[-4000:]
    for marker in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: libFuzzer", "Disagreement", "Traceback"):
        assert marker not in output, tail
    assert proc.returncode == 0, tail
    assert "Using preloaded libfuzzer" in output, "no native coverage: " + tail  # ASan+libFuzzer runtime
    assert "DONE" in output and "stat::number_of_executed_units" in output, tail
    print(tail[-600:], file=sys.stderr)
