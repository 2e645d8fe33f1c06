"""The test suite's own layout: pytest's default `prepend` import mode imports test modules by basename, so
two files with one name (in tests/unit and tests/integration, say) break the collection of the whole run."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_has_a_unique_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
