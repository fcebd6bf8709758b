"""Screenshots of the web console's views for docs/console.md, taken in headless Chromium.

Indexes the sample scenario (tests/fixtures/sample.py) into a temporary store, starts a collector on it
(with a trace UI link configured), opens each view by its deep link and saves one PNG per view
under docs/img/.  Run from the repository root::

    python3 scripts/screenshots.py [--out docs/img] [--chromium /usr/bin/chromium]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from collector.cli.demo import free_port, start_collector, stop_collector  # noqa: E402
from collector.index.indexer import index_records  # noqa: E402
from collector.store import open_store  # noqa: E402
from tests.fixtures.sample import SHARED_KEY, TOPIC, scenario  # noqa: E402

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
VIEWPORT = {"width": 1200, "height": 720}
TRACE_UI = "http://jaeger:16686/trace/{trace_id}"


def shots(now_ms: int) -> list[tuple[str, str]]:
    """(file name, deep link) of each view."""
    t0 = now_ms - 3_600_000
    return [
        ("console-message.png", "#message?id=msg-dead"),
        ("console-search-key.png", f"#search?mode=key&topic={TOPIC}&key={SHARED_KEY}"),
        ("console-search-filter.png", f"#search?mode=topic&topic={TOPIC}&group=billing&outcome=not_consumed"
                                      f"&begin={t0 - 1000}&end={t0 + 4500}"),
        ("console-offsets.png", f"#offsets?topic={TOPIC}&group=billing&time={t0 + 500}"),
        ("console-replay.png", f"#replay?topic={TOPIC}&group=billing"),
    ]


def shrink(path: str) -> None:
    """Reduce the PNG to a 64-colour palette when Pillow is installed (the pictures are flat UI colours)."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


def settle(page) -> None:
    """Wait until the view the URL names has rendered (console.js sets <body data-shown>)."""
    for _ in range(400):
        hash_, shown = page.evaluate("[location.hash, document.body.dataset.shown]")
        if shown is not None and shown == hash_:
            return
        page.wait_for_timeout(25)
    raise SystemExit(f"screenshots: the view {hash_} did not render")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    os.makedirs(args.out, exist_ok=True)
    now_ms = int(time.time() * 1000)
    with tempfile.TemporaryDirectory(prefix="tracehook-shots-") as data_dir:
        store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
        index_records(store, scenario(now_ms)[1])
        store.close()
        os.environ["TRACEHOOK_COLLECTOR_TRACE_UI_URL"] = TRACE_UI
        port = free_port()
        proc = start_collector(data_dir, port)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport=VIEWPORT)
                for name, link in shots(now_ms):
                    page.goto(f"http://127.0.0.1:{port}/{link}")
                    settle(page)
                    if name == "console-message.png":
                        page.wait_for_selector("#trace-ui-link:not([hidden])")
                    if name == "console-search-key.png":  # keyboard focus on the second row
                        page.focus("#results-table tr.result")
                        page.keyboard.press("ArrowDown")
                    path = os.path.join(args.out, name)
                    page.screenshot(path=path)
                    shrink(path)
                    print(f"{path}  {os.path.getsize(path) // 1024} KiB")
                browser.close()
        finally:
            stop_collector(proc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
