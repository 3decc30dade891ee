"""docs/promises.md maps each promise of the README to the tests that prove it (issue 40).

The map stays true by being checked: each quoted phrase is still in the README (line breaks
aside), each named test is still defined in its file (read with `ast`: nothing is imported
or run), and the stages named are the ones make test runs the test in. Those are read, not
copied: scripts/test.sh's `stage` lines, the make targets, scripts/*.sh subcommands and shell
functions they call, down to each pytest command's -m expression, paths and --deselect,
applied to the test's markers. A promise about a running system (`runtime`) must have a test
in a stage that runs one. Pure file reading: no subprocess.
"""

from __future__ import annotations

import ast
import functools
import re
import shlex
from dataclasses import dataclass

import pytest

from .conftest import REPO

pytestmark = pytest.mark.delivery

PAGE = REPO / "docs" / "promises.md"
README = REPO / "README.md"
HEADER = ["promise (README)", "proved by", "where it runs", "about"]
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
    about: str  # runtime: what a running system does; build: what the checkout and its tools do

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
        assert len(found) == 4, f"docs/promises.md line {number}: {len(found)} cells, not 4 (a '|' in a cell?)"
        promise, proof, where, about = found
        quoted = re.fullmatch(r'"([^"]+)"', promise)
        assert quoted, f'docs/promises.md line {number}: the promise is not one "quoted phrase": {promise}'
        tests = TEST_ID.findall(proof)
        leftover = re.sub(r"<br>|,", " ", TEST_ID.sub("", proof)).strip()
        assert tests and not leftover, f"docs/promises.md line {number}: not a list of `file.py::test`: {proof}"
        stages = [stage.strip() for stage in where.split(",")]
        assert about in ABOUT, f"docs/promises.md line {number}: about {about!r}, not one of {ABOUT}"
        rows.append(Row(number, quoted[1], tuple(tests), frozenset(stages), about))
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


# -- where they run: read from scripts/test.sh, the Makefile and the scripts they call ----------

TEST_SH = REPO / "scripts" / "test.sh"
MAKEFILES = (REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk")))
# The page's names for the stages of scripts/test.sh that run tests (its `stage NAME` names).
PAGE_STAGES = {
    "unit": {"unit"},
    "images": {"images"},
    "cluster": {"cluster"},
    "compat": {"compat"},
    "kind": {"kind-e2e", "kind-tests", "kind-down"},
    "argocd": {"argocd-e2e"},
    "pipeline": {"pipeline-blocked", "pipeline-release"},
}
STAGES = tuple(PAGE_STAGES)
# scripts/test.sh's stages for a machine without Go or Docker ("... (no Go: skipped)"): they
# only report those tests skipped, and under CI=true the run fails before them.
NOT_RUN = re.compile(r"\(no [\w ]+: skipped\)")
# The stages that run a system: a local control plane, KinD, Argo CD in KinD, the pipeline on
# it. A promise about what runs (the `runtime` rows) needs a test in one of them.
RUNNING = {"cluster", "compat", "kind", "argocd", "pipeline"}
ABOUT = ("runtime", "build")
PYTEST_OPTIONS_WITH_VALUES = {"-m", "-k", "-n", "-p", "--deselect"}


@dataclass(frozen=True)
class PytestRun:
    """One pytest command of make test: its -m expression, its paths, what it deselects, and the
    environment names set for it."""

    markers: str
    paths: tuple[str, ...]
    deselected: tuple[str, ...]
    env: frozenset[str]


def logical_lines(text: str) -> list[str]:
    """The lines of a shell script or makefile with backslash continuations joined."""
    return [line for line in re.sub(r"\\\n\s*", " ", text).splitlines() if not line.lstrip().startswith("#")]


@functools.cache
def make_variables() -> dict[str, str]:
    found = {}
    for path in MAKEFILES:
        for line in logical_lines(path.read_text()):
            if assigned := re.match(r"^([A-Z_][A-Z0-9_]*)\s*(?::=|\?=|=)\s*(.*)$", line):
                found.setdefault(assigned[1], assigned[2].strip())
    return found


@functools.cache
def make_recipes() -> dict[str, tuple[str, ...]]:
    recipes: dict[str, list[str]] = {}
    target = None
    for path in MAKEFILES:
        for line in logical_lines(path.read_text()):
            if line.startswith("\t") and target:
                recipes[target].append(line.strip())
            elif rule := re.match(r"^([\w.-]+(?: [\w.-]+)*):(?!=)", line):
                target = None if rule[1].startswith(".") else rule[1].split()[0]
                if target:
                    recipes.setdefault(target, [])
            elif line.strip():
                target = None
    return {name: tuple(lines) for name, lines in recipes.items()}


def expand_make(line: str) -> str:
    line = re.sub(r"\$\(if [^()]*(?:\([^()]*\)[^()]*)*\)", "", line)  # $(if $(X),-k "$(X)"): unset in make test
    for _ in range(5):  # variables made of variables
        line = re.sub(r"\$\((\w+)\)", lambda m: make_variables().get(m[1], m[0]), line)
    return line


def shell_variables(text: str) -> dict[str, str]:
    return {
        m[1]: m[2].strip("\"'")
        for m in re.finditer(r"^\s*(?:export )?([A-Z_][A-Z0-9_]*)=(\S+)\s*$", text, re.M)
        if "$(" not in m[2]
    }


def expand_shell(line: str, variables: dict[str, str]) -> str:
    line = re.sub(r"\$\{\w+:\+[^}]*\}", "", line)  # ${TEST_SELECTION:+-k ...}: unset in make test
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m[1], m[0]), line)


ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=.*")


def pytest_at(words: list[str]) -> int | None:
    """Where pytest is the command of `words` (after `env` and NAME=value only), or None."""
    for at, word in enumerate(words):
        if word.endswith("/pytest"):
            return at
        if word not in ("env", "exec") and not ASSIGNMENT.fullmatch(word):
            return None
    return None


def pytest_run(words: list[str], at: int) -> PytestRun:
    env = frozenset(word.split("=")[0] for word in words[:at] if ASSIGNMENT.fullmatch(word))
    markers, paths, deselected = "", [], []
    arguments = iter(words[at + 1 :])
    for word in arguments:
        if word in PYTEST_OPTIONS_WITH_VALUES:
            value = next(arguments)
            markers = value if word == "-m" else markers
            deselected += [value] if word == "--deselect" else []
        elif not word.startswith(("-", "$", ">")) and word not in (";", "&&", "||"):
            paths.append(word)
    return PytestRun(markers, tuple(paths), tuple(deselected), env)


def script_functions(text: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r"^(\w+)\(\) \{\n(.*?)^\}", text, re.M | re.S)}


def runs_of_lines(lines: list[str], script: str, seen: set[str]) -> list[PytestRun]:
    """The pytest commands that `lines` (of `script`'s text, or of a recipe when "") run,
    following make targets, scripts/*.sh (their subcommand's function) and shell functions."""
    functions = script_functions(script)
    variables = shell_variables(script)
    found = []
    for line in lines:
        try:
            words = shlex.split(expand_shell(expand_make(line), variables))
        except ValueError:
            continue  # a line of a multi-line string
        if (at := pytest_at(words)) is not None:
            found.append(pytest_run(words, at))
            continue
        for at, word in enumerate(words):
            if word in ("make", "$(MAKE)"):
                targets = [w for w in words[at + 1 :] if not w.startswith("-") and "=" not in w]
                for target in targets:
                    if f"make {target}" not in seen and target in make_recipes():
                        found += runs_of_lines(list(make_recipes()[target]), "", seen | {f"make {target}"})
                break
            if called := re.fullmatch(r"(?:\./)?(scripts/[\w-]+\.sh)", word):
                sub = words[at + 1].rstrip(";") if at + 1 < len(words) else ""
                if f"{called[1]} {sub}" not in seen:
                    found += runs_of_script(called[1], sub, seen | {f"{called[1]} {sub}"})
                break
            if word in functions and f"{id(script)} {word}" not in seen:
                body = logical_lines(functions[word])
                found += runs_of_lines(body, script, seen | {f"{id(script)} {word}"})
    return found


DISPATCH = re.compile(r"^\s+([\w|-]+)\)\s*(.*?)\s*;;", re.M)  # `  e2e) cmd_e2e ;;` of a `case "$1" in`


def runs_of_script(path: str, subcommand: str, seen: set[str]) -> list[PytestRun]:
    """What `scripts/X.sh SUBCOMMAND` runs: its dispatch line for SUBCOMMAND if it has one, else
    its top-level lines (outside its functions and dispatch), with the functions they call."""
    text = (REPO / path).read_text()
    branches = {name: command for names, command in DISPATCH.findall(text) for name in names.split("|")}
    if subcommand in branches:
        return runs_of_lines([branches[subcommand]], text, seen)
    top_level = DISPATCH.sub("", re.sub(r"^\w+\(\) \{\n.*?^\}", "", text, flags=re.M | re.S))
    return runs_of_lines(logical_lines(top_level), text, seen)


@functools.cache
def make_test_stages() -> dict[str, tuple[PytestRun, ...]]:
    """scripts/test.sh's `stage NAME "what" COMMAND...` -> the pytest commands COMMAND runs."""
    text = TEST_SH.read_text()
    stages: dict[str, list[PytestRun]] = {}
    for line in logical_lines(text):
        found = re.search(r'(?:^|\s)stage ([\w-]+) "([^"]*)" (.+)$', line)
        if found and not NOT_RUN.search(found[2]):
            prefix = line[: found.start()].split()  # env assignments before `stage`
            command = " ".join([*prefix, found[3]])
            stages.setdefault(found[1], []).extend(runs_of_lines([command], text, set()))
    return {name: tuple(runs) for name, runs in stages.items()}


def matches(expression: str, markers: set[str]) -> bool:
    """A pytest -m expression (names, and, or, not, parentheses) for a test with `markers`."""
    words = re.findall(r"\(|\)|[^\s()]+", expression)
    assert all(w in "()" or re.fullmatch(r"[A-Za-z_]\w*", w) for w in words), f"not a -m expression: {expression}"
    keywords = ("and", "or", "not", "(", ")")
    return eval(" ".join(w if w in keywords else str(w in markers) for w in words), {"__builtins__": {}})  # noqa: S307


@functools.cache
def pytest_testpaths() -> tuple[str, ...]:
    found = re.search(r"^testpaths\s*=\s*(.+)$", (REPO / "pytest.ini").read_text(), re.M)
    return tuple(found[1].split())


def selects(run: PytestRun, path: str, name: str, markers: set[str], arguments: set[str]) -> bool:
    def under(given: str) -> bool:  # a folder, a file, or file::test as pytest takes them
        if "::" in given:
            return given == f"{path}::{name}"
        return path == given or path.startswith(given.rstrip("/") + "/")

    if not any(under(given) for given in run.paths or pytest_testpaths()):
        return False
    if f"{path}::{name}" in run.deselected or (run.markers and not matches(run.markers, markers)):
        return False
    if "e2e" in markers:
        # tests/e2e/conftest.py: with E2E_USE_INSTALLED (make e2e, on KinD) the suite skips what
        # needs its own processes (local_only); without it, what needs an installed release or
        # containers that run (installed_only, the containers_run fixture).
        if "E2E_USE_INSTALLED" in run.env:
            return "local_only" not in markers
        return "installed_only" not in markers and "containers_run" not in arguments
    return True


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


def markers_of(path: str, name: str) -> tuple[set[str], set[str]]:
    """The test's markers (its module's, its class's, its own) and its arguments (fixtures)."""
    tree = module(path)
    function, classes = definition(tree, name)
    markers = pytestmark_of(tree.body)
    for owner in classes:
        markers |= pytestmark_of(owner.body) | {m for d in owner.decorator_list for m in marker_names(d)}
    markers |= {m for d in function.decorator_list for m in marker_names(d)}
    return markers, {a.arg for a in function.args.args}


def stages_of(path: str, name: str) -> set[str]:
    """The page's stages whose pytest commands (as scripts/test.sh runs them) select this test."""
    markers, arguments = markers_of(path, name)
    return {
        page
        for page, names in PAGE_STAGES.items()
        for stage in names
        for run in make_test_stages().get(stage, ())
        if selects(run, path, name, markers, arguments)
    }


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
                f"make test runs its tests in {', '.join(s for s in STAGES if s in derived)}"
            )
    assert not problems, "\n".join(problems)


def test_a_promise_about_a_running_system_is_proved_on_one():
    """A runtime promise proved only by unit or docs tests could be false where it matters: at
    least one of its tests runs in a stage that runs the system."""
    problems = [
        f"{row}: a runtime promise whose tests run only in {', '.join(sorted(row.stages))}"
        for row in table()
        if row.about == "runtime" and not row.stages & RUNNING
    ]
    assert not problems, "\n".join(problems)


def test_the_page_names_every_stage_of_make_test_that_runs_tests():
    """The page's stage names against scripts/test.sh's: each one names stages there that run
    pytest, and every stage there that runs pytest has a name here."""
    running_tests = {name for name, runs in make_test_stages().items() if runs}
    named_here = set().union(*PAGE_STAGES.values())
    assert named_here <= running_tests, f"not stages of scripts/test.sh that run tests: {named_here - running_tests}"
    assert running_tests <= named_here, (
        f"stages of scripts/test.sh the page has no name for: {running_tests - named_here}"
    )
    # Each run's -m expression is one the reader can evaluate.
    for name in named_here:
        for run in make_test_stages()[name]:
            matches(run.markers, set())


def test_the_marker_expressions_read_as_pytest_reads_them():
    """The checker itself: -m expressions, and a test selected by its markers and paths."""
    assert matches("not cluster and not e2e", {"delivery"})
    assert not matches("not cluster and not e2e", {"delivery", "e2e"})
    assert matches("cluster or (e2e and not kind)", {"e2e"})
    assert not matches("compat", set())
    run = PytestRun("kind", ("tests/kind",), ("tests/kind/test_a.py::test_down",), frozenset())
    assert selects(run, "tests/kind/test_a.py", "test_up", {"kind"}, set())
    assert not selects(run, "tests/kind/test_a.py", "test_down", {"kind"}, set())
    assert not selects(run, "tests/kindness/test_a.py", "test_up", {"kind"}, set())
    installed = PytestRun("e2e", ("tests/e2e",), (), frozenset({"E2E_USE_INSTALLED"}))
    assert not selects(installed, "tests/e2e/test_a.py", "test_a", {"e2e", "local_only"}, set())
    assert selects(installed, "tests/e2e/test_a.py", "test_a", {"e2e"}, {"containers_run"})


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
