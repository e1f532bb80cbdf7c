"""docs/architecture.md states numbers about the code: the commands, the forms of a training run's settings, the walk
of a warm-started run from the command line to the loss, and the files over 450 lines. Each is read from the page and
checked against the code here, so that the page stays true when the code moves; and the one construction of a run's
``TrainingArguments``, which nothing assigns to afterwards."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hf_tlaser.cli import COMMANDS

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hf_tlaser"
DOC = ROOT / "docs" / "architecture.md"
LONG = 450
"""The length past which the page lists a file."""


def section(title: str, text: str | None = None) -> str:
    """The text of the page's section with this heading (up to the next heading of any level)."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^#+ |\Z)", text, flags=re.S | re.M)
    assert match, f"docs/architecture.md has no section {title!r}"
    return match.group(1)


def defined_names(path: Path) -> set[str]:
    """Every function, method and class name defined in a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def walk_stops(text: str) -> list[tuple[str, list[str]]]:
    """The stops of a walk written as ``file.py`` (``function``, ...), in order."""
    stops = []
    for match in re.finditer(r"`([\w/]+\.py)`(?: \(([^)]*)\))?", text):
        stops.append((match.group(1), re.findall(r"`(\w+)`", match.group(2) or "")))
    return stops


def counts(stops: list[tuple[str, list[str]]]) -> tuple[int, int, int]:
    """Stops, distinct files, re-entries (stops in a file already left)."""
    files = {path for path, _ in stops}
    return len(stops), len(files), len(stops) - len(files)


def table_row(text: str, label: str) -> list[str]:
    """The cells of the markdown table row whose first cell is ``label``."""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells and cells[0] == label:
            return cells
    raise AssertionError(f"no table row {label!r}")


def test_the_diagram_names_every_command():
    """The top layer's line states the number of commands and names each of ``hf-tlaser``'s."""
    layers = section("Layers")
    top = layers[layers.index(" 8  cli.py") : layers.index("──")]
    stated = re.search(r"(\d+) commands: ([^()]*)", " ".join(top.split()))
    assert stated, "the top layer states 'N commands: a, b, ...'"
    assert int(stated.group(1)) == len(COMMANDS)
    assert [name.strip() for name in stated.group(2).split(",")] == list(COMMANDS)


def test_the_walk_names_real_files_and_functions_and_its_counts_add_up():
    """Every stop of the warm run's walk is a file of the package that defines the functions named there, and the
    table's row for today has the walk's own counts."""
    text = section("Files entered by a warm-started run")
    walk = text[text.index("Now: ") : text.index("\n\n", text.index("Now: "))]
    stops = walk_stops(walk)
    assert len(stops) > 10
    for path, functions in stops:
        module = PACKAGE / path
        assert module.is_file(), f"the walk names {path}, which is not a module of hf_tlaser"
        missing = set(functions) - defined_names(module)
        assert not missing, f"{path} defines no {sorted(missing)}"
    row = table_row(text, "now (issue 72)")
    assert tuple(int(cell) for cell in row[1:4]) == counts(stops)


def test_the_counting_of_a_walk():
    """A file left and entered again is a re-entry; the functions are read from the parentheses."""
    stops = walk_stops("`a.py` (`f`, `g`), `b.py`, `a.py` (`h`), `c/d.py` (`k`)")
    assert stops == [("a.py", ["f", "g"]), ("b.py", []), ("a.py", ["h"]), ("c/d.py", ["k"])]
    assert counts(stops) == (4, 3, 1)


def test_the_forms_of_the_settings_are_classes_of_today_and_the_gone_ones_are_gone():
    """Today's forms are classes defined in the package (or transformers' and argparse's), their count is the
    row's; a form of the 'before' row missing from today's is defined nowhere in the package."""
    text = section("The forms of a run's settings")
    now, before = table_row(text, "now"), table_row(text, "before (issue 72, at 8fe96d7)")
    outside = {"Namespace", "TrainingArguments", "PretrainedConfig", "LaserTrainer"}
    named_now = re.findall(r"`(\w+)`", now[1])
    assert int(now[2]) == len(named_now)
    defined = set().union(*(defined_names(path) for path in package_modules()))
    assert set(named_now) - outside <= defined
    gone = set(re.findall(r"`(\w+)`", before[1])) - set(named_now)
    assert gone == {"RunOptions"}
    assert not gone & defined


def test_the_listed_long_files_are_the_files_over_450_lines():
    """The page lists exactly the package's modules over 450 lines, with their lengths."""
    text = section("Files over 450 lines")
    listed = dict(re.findall(r"^\| `([\w/]+\.py)` \| (\d+) \|", text, flags=re.M))
    actual = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines()) for path in package_modules()
    }
    assert {path: int(lines) for path, lines in listed.items()} == {
        path: lines for path, lines in actual.items() if lines > LONG
    }


def assignments_to_training_arguments(tree: ast.AST) -> list[int]:
    """Lines that assign to an attribute of something named ``training_args`` or ``args`` (``x.training_args.y =``,
    ``training_args.y =``, ``trainer.args.y =``)."""
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            continue
        for target in targets:
            if isinstance(target, ast.Attribute):
                owner = target.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name in {"training_args", "args"}:
                    lines.append(node.lineno)
    return lines


def test_training_arguments_are_built_in_one_place_and_never_assigned_to():
    """One ``TrainingArguments(...)`` call in the package (``training/run.training_arguments``), and no assignment
    to an attribute of a run's arguments in the training code (``args`` elsewhere are argparse's)."""
    calls, assigned = [], []
    for path in package_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TrainingArguments":
                calls.append(str(path.relative_to(PACKAGE)))
        if path.parent.name == "training":
            assigned += [f"{path.relative_to(PACKAGE)}:{line}" for line in assignments_to_training_arguments(tree)]
    assert calls == ["training/run.py"]
    assert assigned == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("run.training_args.ignore_data_skip = True\n", [1]),
        ("training_args.gradient_accumulation_steps = 4\n", [1]),
        ("trainer.args.max_steps += 1\n", [1]),
        ("self.args = args\nsettings.max_steps = 3\n", []),
    ],
)
def test_the_assignment_check_sees_what_it_must(source, found):
    """The check finds the assignments the code had before (``joint.py``, ``run.py``) and spares plain ones."""
    assert assignments_to_training_arguments(ast.parse(source)) == found
