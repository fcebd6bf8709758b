"""The rules the layout keeps (README, "Layout"): checked on the source, so a change that breaks one fails here.

- the library (``tracehook/``) imports neither ``collector`` nor ``spark_jobs``;
- no import circles between modules (function-local imports count: they are how circles hide);
- only ``collector/store`` and the indexer above it (``collector/index``) build or parse row keys (import
  ``collector.store.keys``), and the store imports nothing of the indexer;
- one error module per package, and only ``collector/server/errors.py`` knows HTTP statuses;
- ``pip install tracehook`` is the library and msgpack; the extras follow the packages;
- the five adapters get ``instrument`` / ``uninstrument`` from one helper;
- the tests mirror the packages.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("tracehook", "collector", "spark_jobs")


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _imports(module: str) -> set[str]:
    """First-party modules ``module`` imports anywhere (not under ``if TYPE_CHECKING``)."""
    tree = ast.parse(MODULES[module].read_text())
    is_package = MODULES[module].name == "__init__.py"
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in names if name in MODULES and name != module}


GRAPH = {module: _imports(module) for module in MODULES}


def test_the_library_imports_no_service_code() -> None:
    offenders = {m: sorted(i for i in deps if i.split(".")[0] != "tracehook")
                 for m, deps in GRAPH.items() if m.split(".")[0] == "tracehook"}
    assert {m: d for m, d in offenders.items() if d} == {}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            strongconnect(v)
    return found


def test_no_import_circles() -> None:
    # a package's __init__ re-exporting its submodules is not a circle worth reporting
    cycles = [c for c in _cycles() if not all(m.startswith(c[0] + ".") or m == c[0] for m in c)]
    assert cycles == []


def test_only_the_store_and_the_indexer_build_or_parse_row_keys() -> None:
    users = sorted(m for m, deps in GRAPH.items() if "collector.store.keys" in deps)
    assert [m for m in users if not m.startswith(("collector.store.", "collector.index."))] == []


def test_the_store_imports_nothing_of_the_indexer() -> None:
    """The indexer sits above the store: ``collector.index`` imports ``collector.store``, never the reverse."""
    store = [m for m in GRAPH if m == "collector.store" or m.startswith("collector.store.")]
    assert {m: sorted(d for d in GRAPH[m] if d.split(".")[:2] == ["collector", "index"]) for m in store
            if any(d.split(".")[:2] == ["collector", "index"] for d in GRAPH[m])} == {}


@pytest.mark.parametrize("package", ["tracehook", "collector.log", "collector.store", "collector.index",
                                     "collector.query", "collector.server", "collector.cli", "spark_jobs"])
def test_one_error_module_per_package(package: str) -> None:
    assert f"{package}.errors" in MODULES
    elsewhere = []
    for module, path in MODULES.items():
        if module.rpartition(".")[0] != package and module != package or module.endswith(".errors"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id == "ValueError")
                    for b in node.bases):
                elsewhere.append(f"{module}.{node.name}")
    assert elsewhere == []


def test_only_the_server_errors_module_knows_http_statuses() -> None:
    statuses = []
    for module, path in MODULES.items():
        if module == "collector.server.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "status"
                                                             for t in stmt.targets)):
                        statuses.append(f"{module}.{node.name}")
    assert statuses == []


def test_extras_follow_the_packages() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0] for d in project["dependencies"]] == ["msgpack"]
    extras = project["optional-dependencies"]
    assert {"collector", "index", "hbase", "kafka", "rabbitmq", "all"} <= set(extras)
    assert any(d.startswith("aiohttp") for d in extras["collector"])
    assert any(d.startswith("pyspark==") for d in extras["index"])
    assert all(name in extras["all"][0] for name in ("collector", "index", "hbase", "kafka", "rabbitmq"))


@pytest.mark.parametrize("adapter", ["aio_pika", "aiokafka", "confluent", "kafka_python", "pika"])
def test_adapters_share_one_instrument_helper(adapter: str) -> None:
    from tracehook.adapters._common import Instrumentation

    module = importlib.import_module(f"tracehook.adapters.{adapter}")
    for name in ("instrument", "uninstrument", "is_instrumented"):
        assert isinstance(getattr(module, name).__self__, Instrumentation)


def test_tests_mirror_the_packages() -> None:
    for package in ("tracehook/adapters", "collector/log", "collector/store", "collector/query",
                    "collector/server", "collector/cli", "spark_jobs"):
        assert (ROOT / "tests" / package).is_dir(), package
    assert not (ROOT / "tests" / "adapters").exists()
