"""The test suite's own layout: pytest's default `prepend` import mode imports test modules by basename, so
two files with one name (in tests/unit and tests/integration, say) break the collection of the whole run.

Unit tests live in folders by concern (tests/unit/judge, tests/unit/sim, ...); what several test modules
build comes from a kit module at tests/unit (on pytest's `pythonpath`), never from another test module."""

import re
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
UNIT = TESTS / "unit"
BENCHMARKS = TESTS.parent / "benchmarks"
IMPORTS_A_TEST_MODULE = re.compile(r"^\s*(from|import)\s+test_", re.MULTILINE)


def test_every_test_module_has_a_unique_basename() -> None:
    """And so does every other module imported by its basename: the kits, and the benchmarks some tests import."""
    modules = [*TESTS.rglob("*.py"), *BENCHMARKS.glob("*.py")]
    names = Counter(path.name for path in modules if path.name != "conftest.py")
    assert [name for name, count in names.items() if count > 1] == []


def test_no_test_module_imports_another() -> None:
    importers = [path for path in TESTS.rglob("*.py") if IMPORTS_A_TEST_MODULE.search(path.read_text())]
    assert [str(path.relative_to(TESTS)) for path in importers] == []


def test_every_unit_test_module_is_in_a_concern_folder_which_is_not_a_package() -> None:
    assert sorted(path.name for path in UNIT.glob("test_*.py")) == []
    assert all(path.parent.parent == UNIT for path in UNIT.rglob("test_*.py"))
    assert sorted(str(path.relative_to(UNIT)) for path in UNIT.rglob("__init__.py")) == []
