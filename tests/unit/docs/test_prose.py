"""The prose around the code explains it: comments and docstrings give reasons, not the tracker items that asked
for them; long derivations live in docs/; and the glossary of docs/architecture.md names code that exists.

A pointer to a numbered tracker item tells a reader nothing once the tracker is gone or renumbered; the reason it
stands for is what the next change needs. A proof in a module docstring is read by nobody who opens the docs,
and it hides the code below it.
"""

import ast
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

from repokit import ROOT

PYTHON_TREES = ("operator", "tests", "benchmarks")
TRACKER_REFERENCE = re.compile(r"\b(?:issue|session)s? #?\d+", re.IGNORECASE)
"""A numbered issue or session: where a request came from, not why the code is as it is."""
DOCSTRING_WORDS = 500
"""The longest docstring in the operator's package, in words: past it, a derivation belongs in docs/."""
ARCHITECTURE = ROOT / "docs" / "architecture.md"
CODE_NAME = re.compile(r"`([a-z_]+(?:\.[A-Za-z_]+)+)`")
"""A dotted name relative to `specfleet` in the glossary's third column."""


def _python_files(*trees: str) -> list[Path]:
    return sorted(path for tree in trees for path in (ROOT / tree).rglob("*.py"))


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and of every string that stands alone as a statement (the docstrings of
    modules, classes, functions and attributes)."""
    source = path.read_text()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value


def test_no_comment_or_docstring_names_the_issue_or_session_that_asked_for_it() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {match.group(0)}"
        for path in _python_files(*PYTHON_TREES)
        for line, text in _prose(path)
        for match in TRACKER_REFERENCE.finditer(text)
    ]
    assert not found, "say the reason instead:\n" + "\n".join(found)


def _text_files() -> list[Path]:
    """The docs, the CI scripts, the chart and the images: prose beside the Python."""
    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    trees = [path for tree in (".ci", "charts", "images") for path in (ROOT / tree).rglob("*") if path.is_file()]
    return sorted(pages + trees)


def test_no_page_script_or_chart_names_the_issue_or_session_that_asked_for_it() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {match.group(0)}"
        for path in _text_files()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        for match in TRACKER_REFERENCE.finditer(line)
    ]
    assert not found, "say the reason instead:\n" + "\n".join(found)


def test_the_tracker_pattern_finds_what_it_is_for() -> None:
    """The check above can fail: the pattern matches the references it is meant to keep out."""
    assert TRACKER_REFERENCE.search("Write discipline (Issue 12, item 10): ...")
    assert TRACKER_REFERENCE.search("# issues #4 and #5")
    assert TRACKER_REFERENCE.search("run 3 (final code of session 2)")
    assert not TRACKER_REFERENCE.search("Flagger #1095; vllm-project/vllm#35060; an issue, 12 of them")


def test_no_docstring_of_the_operator_is_a_treatise() -> None:
    long = []
    for path in _python_files("operator"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                words = len((ast.get_docstring(node) or "").split())
                if words > DOCSTRING_WORDS:
                    long.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)} ({words} words)")
    assert not long, "move the derivation to docs/ and leave a one-line pointer:\n" + "\n".join(long)


def _glossary() -> list[tuple[str, str]]:
    """(word, its third column) of each row of the glossary's table."""
    text = ARCHITECTURE.read_text()
    assert "\n## Glossary\n" in text, "docs/architecture.md has no Glossary section"
    section = text.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    return [(cells[0].removeprefix("| ").strip(), cells[-1].removesuffix(" |").strip()) for cells in rows[1:]]


def _resolves(dotted: str) -> bool:
    """Whether `specfleet.<dotted>` names a module, or an attribute or model field reached from one."""
    parts = f"specfleet.{dotted}".split(".")
    for split in range(len(parts), 1, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for name in parts[split:]:
            fields = getattr(target, "model_fields", {})
            if hasattr(target, name):
                target = getattr(target, name)
            elif name in fields:
                target = fields[name]
            else:
                return False
        return True
    return False


GLOSSARY = _glossary()


def test_the_glossary_has_its_words() -> None:
    words = {word for word, _ in GLOSSARY}
    assert {"look", "pass", "room", "slice", "step", "track", "verdict", "holdback", "drift", "`Pass.but`"} <= words


@pytest.mark.parametrize(("word", "code"), GLOSSARY, ids=[word for word, _ in GLOSSARY])
def test_every_glossary_word_names_code_that_exists(word: str, code: str) -> None:
    names = CODE_NAME.findall(code)
    assert names, f"the glossary's {word!r} names no code"
    missing = [name for name in names if not _resolves(name)]
    assert not missing, f"the glossary's {word!r} names code that is gone: {missing}"


def _squashed(text: str) -> str:
    return re.sub(r"[\s_`]", "", text).lower()


SOURCE = _squashed("\n".join(path.read_text() for path in _python_files("operator")))


@pytest.mark.parametrize("word", [word for word, _ in GLOSSARY])
def test_every_glossary_word_is_a_word_of_the_code(word: str) -> None:
    """`fleet look` is found as `fleet_look`, `shard gate` as `ShardGate`: the code uses the doc's words (a
    word that is code itself, `Pass.but`, by its last name; the test above resolves it whole)."""
    for each in word.split(", "):
        name = each.strip("`").rsplit(".", 1)[-1]
        assert _squashed(name) in SOURCE, f"the glossary's {each!r} appears nowhere in operator/"


def test_a_name_that_is_gone_does_not_resolve() -> None:
    """The glossary checks can fail: a dotted name resolves only when every part of it exists."""
    assert _resolves("rollout.state.Pass.but")
    assert _resolves("api.status.SpeculativeDeploymentStatus.rejected_revision")  # a pydantic field
    assert not _resolves("rollout.state.Pass.but_not_this")
    assert not _resolves("rollout.nowhere.Pass")
    assert _squashed("nowhere in the code at all") not in SOURCE
