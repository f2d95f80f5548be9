"""Functional core, imperative shell: the import rules that keep it so."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "processors": {"state", "streams", "confluent_kafka", "faust", "rocksdict", "prometheus_client"},
    "schemas": {"processors", "state", "streams", "confluent_kafka", "faust", "rocksdict"},
    "state": {"streams", "confluent_kafka", "faust"},
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_layers_import_only_what_they_may() -> None:
    violations = []
    for package, forbidden in FORBIDDEN.items():
        for path in (ROOT / package).rglob("*.py"):
            bad = imported_roots(path) & forbidden
            if bad:
                violations.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert violations == []


def test_only_the_kv_adapter_imports_rocksdict() -> None:
    users = [p.relative_to(ROOT).as_posix() for pkg in ("state", "streams", "processors")
             for p in (ROOT / pkg).rglob("*.py") if "rocksdict" in imported_roots(p)]
    assert users == ["state/kv.py"]


def test_tests_take_their_helpers_from_tests_support_not_from_the_benchmarks() -> None:
    """A benchmark may import a test helper (tests/support), never the other way round: a test must not
    break because a benchmark changed, nor a benchmark be kept for a test's sake."""
    tests = ROOT / "tests"
    importers = {p.relative_to(ROOT).as_posix() for p in tests.rglob("*.py")
                 if not p.is_relative_to(tests / "benchmarks")
                 and any(name.startswith("tests.benchmarks") for name in imported_modules(p))}
    assert importers == set()


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names
