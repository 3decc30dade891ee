"""docs/promises.md maps each promise of the README to the tests that prove it (issue 40).

The map stays true by being checked: each quoted phrase is still in the README (line breaks
aside), each named test is still defined in its file (read with `ast`: nothing is imported
or run), and the stages named are the ones the test's markers put it in (pytest.ini's
markers, the Makefile's UNIT_TESTS, scripts/test.sh). Pure file reading: no subprocess.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass

import pytest

from .conftest import REPO

pytestmark = pytest.mark.delivery

PAGE = REPO / "docs" / "promises.md"
README = REPO / "README.md"
HEADER = ["promise (README)", "proved by", "where it runs"]
STAGES = ("unit", "images", "cluster", "compat", "kind", "argocd", "pipeline")
# `path/to/test_file.py::test_name`, `path/to/test_file.py::Class::test_name`, or
# `path/to/test_file.py` alone: every test of a file (for a file still being written).
TEST_ID = re.compile(r"`([^`\s]+\.py)(?:::([A-Za-z_]\w*(?:::[A-Za-z_]\w*)?))?`")
MIN_ROWS = 20


@dataclass(frozen=True)
class Row:
    line: int
    phrase: str
    tests: tuple[tuple[str, str], ...]  # (file, "name", "Class::name" or "" for the whole file)
    stages: frozenset[str]

    def __str__(self) -> str:
        return f"docs/promises.md line {self.line} ({self.phrase!r})"


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def collapsed(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@functools.cache
def table() -> tuple[Row, ...]:
    """The rows of the one table of docs/promises.md; fails on a row it cannot read."""
    lines = PAGE.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("|") and cells(line) == HEADER]
    assert len(starts) == 1, f"docs/promises.md: expected one table headed {HEADER}, found {len(starts)}"
    rows = []
    for number, line in enumerate(lines[starts[0] + 2 :], start=starts[0] + 3):
        if not line.startswith("|"):
            break
        found = cells(line)
        assert len(found) == 3, f"docs/promises.md line {number}: {len(found)} cells, not 3 (a '|' in a cell?)"
        promise, proof, where = found
        quoted = re.fullmatch(r'"([^"]+)"', promise)
        assert quoted, f'docs/promises.md line {number}: the promise is not one "quoted phrase": {promise}'
        tests = TEST_ID.findall(proof)
        leftover = re.sub(r"<br>|,", " ", TEST_ID.sub("", proof)).strip()
        assert tests and not leftover, f"docs/promises.md line {number}: not a list of `file.py::test`: {proof}"
        stages = [stage.strip() for stage in where.split(",")]
        rows.append(Row(number, quoted[1], tuple(tests), frozenset(stages)))
    return tuple(rows)


def test_the_table_has_a_row_for_each_of_at_least_twenty_promises():
    rows = table()
    assert len(rows) >= MIN_ROWS, f"docs/promises.md has {len(rows)} rows, fewer than {MIN_ROWS}"
    phrases = [row.phrase for row in rows]
    assert len(set(phrases)) == len(phrases), "a promise is quoted twice"


def test_each_quoted_promise_is_in_the_readme():
    readme = collapsed(README.read_text())
    missing = [str(row) for row in table() if collapsed(row.phrase) not in readme]
    assert not missing, "quoted, but not (or no longer) in README.md:\n" + "\n".join(missing)


# -- the tests named -------------------------------------------------------------------------


@functools.cache
def module(path: str) -> ast.Module | None:
    file = REPO / path
    return ast.parse(file.read_text(), filename=path) if file.is_file() else None


def definition(tree: ast.Module, name: str) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, list[ast.ClassDef]] | None:
    """The test function `name` ("test_x" or "Class::test_x") defined at the top of `tree`,
    with the class it is in (none or one)."""
    *owner, function = name.split("::")
    body: list[ast.stmt] = tree.body
    classes: list[ast.ClassDef] = []
    if owner:
        classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner[0]][:1]
        if not classes:
            return None
        body = classes[0].body
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            return node, classes
    return None


def collected_tests(tree: ast.Module) -> list[str]:
    """Every test pytest collects from the file: test_* functions, Test* classes' test_* methods."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            found.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [
                f"{node.name}::{method.name}"
                for method in node.body
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef) and method.name.startswith("test")
            ]
    return found


def named(path: str, name: str) -> list[str]:
    """The tests an entry of the table names: itself, or each test of its file."""
    return [name] if name else collected_tests(module(path))


def test_each_named_test_is_defined_in_its_file():
    problems = []
    for row in table():
        for path, name in row.tests:
            tree = module(path)
            if tree is None:
                problems.append(f"{row}: no file {path}")
            elif not name and not collected_tests(tree):
                problems.append(f"{row}: {path} defines no test")
            elif not name:
                continue
            elif not name.split("::")[-1].startswith("test"):
                problems.append(f"{row}: {path}::{name} is not a name pytest collects")
            elif definition(tree, name) is None:
                problems.append(f"{row}: {path} defines no {name}")
    assert not problems, "\n".join(problems)


# -- where they run --------------------------------------------------------------------------


def marker_names(expression: ast.expr | None) -> set[str]:
    """X of every pytest.mark.X (called or not) in a decorator or a pytestmark value."""
    if expression is None:
        return set()
    return {
        node.attr
        for node in ast.walk(expression)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "pytest"
    }


def pytestmark_of(body: list[ast.stmt]) -> set[str]:
    return {
        name
        for node in body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
        for name in marker_names(node.value)
    }


def stages_of(path: str, name: str) -> set[str]:
    """The stages of `make test` that run this test, from its markers (its module's, its class's,
    its own) and, for the e2e suite, what tests/e2e/conftest.py skips where."""
    tree = module(path)
    function, classes = definition(tree, name)
    markers = pytestmark_of(tree.body)
    for owner in classes:
        markers |= pytestmark_of(owner.body) | {m for d in owner.decorator_list for m in marker_names(d)}
    markers |= {m for d in function.decorator_list for m in marker_names(d)}
    arguments = {a.arg for a in function.args.args}

    stages = set()
    if markers & {"cluster", "faults"}:
        stages.add("cluster")  # make test-cluster: -m "cluster or e2e or faults"
    if "e2e" in markers:
        # The e2e suite runs on the local control plane and again in make e2e on KinD, where
        # E2E_USE_INSTALLED=1 skips local_only; installed_only and containers_run need KinD.
        if "installed_only" in markers or "containers_run" in arguments:
            stages.add("kind")
        elif "local_only" in markers:
            stages.add("cluster")
        else:
            stages |= {"cluster", "kind"}
    stages |= markers & {"images", "compat", "kind", "argocd", "pipeline"}  # compat: make test-compat
    return stages or {"unit"}  # the Makefile's UNIT_TESTS: none of the markers above


def test_each_row_names_the_stages_its_tests_run_in():
    problems = []
    for row in table():
        unknown = row.stages - set(STAGES)
        if unknown:
            problems.append(f"{row}: {sorted(unknown)} are not stages of make test {STAGES}")
            continue
        if any(module(path) is None or (name and definition(module(path), name) is None) for path, name in row.tests):
            continue  # test_each_named_test_is_defined_in_its_file says which
        derived = set().union(*(stages_of(path, test) for path, name in row.tests for test in named(path, name)))
        if derived != row.stages:
            problems.append(
                f"{row}: says {', '.join(s for s in STAGES if s in row.stages)}; "
                f"its tests' markers say {', '.join(s for s in STAGES if s in derived)}"
            )
    assert not problems, "\n".join(problems)


def test_the_page_is_linked_from_the_docs_index():
    assert "(promises.md)" in (REPO / "docs" / "README.md").read_text()


def test_an_unknown_name_is_not_taken_for_a_test():
    """The checker itself: `definition` finds module functions and Class::method only, and
    `collected_tests` what pytest would collect."""
    tree = ast.parse("def test_a():\n    pass\n\nclass TestB:\n    def test_c(self):\n        pass\n")
    assert definition(tree, "test_a") is not None
    assert definition(tree, "TestB::test_c") is not None
    assert definition(tree, "test_c") is None
    assert definition(tree, "TestB::test_a") is None
    assert definition(tree, "TestX::test_c") is None
    assert collected_tests(tree) == ["test_a", "TestB::test_c"]
