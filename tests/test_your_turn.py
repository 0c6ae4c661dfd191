"""Every exercise with a checker has a "your turn" cell (id your-turn-<function>) right where a
learner writes: the signature, `raise NotImplementedError  # your code here` and the checker
call, stored with the checker's one-line "not written yet" answer. Put the worked solution from
solutions/ in its place and the chapter, run from the top, says "Correct" in every one."""

import ast
import importlib
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(
    path
    for path in (ROOT / "notebooks").glob("*.ipynb")
    if list((ROOT / "solutions").glob(f"ch{path.name[:2]}_*.py"))
)
NOT_WRITTEN = re.compile(
    r"Not yet: `\w+`( and `\w+`)? (is|are) not written yet "
    r"\((it|they) raised NotImplementedError\)\.\n"
)


def solution_module(notebook: Path) -> str:
    (path,) = (ROOT / "solutions").glob(f"ch{notebook.name[:2]}_*.py")
    return path.stem


def your_turn_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.get("id", "").startswith("your-turn-")]


def defined_functions(source: str) -> list[str]:
    return [node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]


def with_the_solution(source: str, module: str) -> str:
    """The cell with its function definitions replaced by the worked solutions' import."""
    tree = ast.parse(source)
    names = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    rest = [
        ast.get_source_segment(source, node)
        for node in tree.body
        if not isinstance(node, ast.FunctionDef)
    ]
    return "\n".join([f"from solutions.{module} import {', '.join(names)}", *rest])


def printed(cell) -> str:
    return "".join(
        output.get("text", "")
        for output in cell.get("outputs", [])
        if output.get("name") == "stdout"
    )


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.name)
def test_every_checker_has_a_your_turn_cell_stored_as_not_written_yet(path):
    notebook = nbformat.read(path, as_version=4)
    module = solution_module(path)
    checkers = importlib.import_module(f"helpers.exercises.{module}").__all__
    cells = your_turn_cells(notebook)
    called = sorted(name for name in checkers for cell in cells if f"{name}(" in cell.source)
    assert called == sorted(checkers), f"{path.name}: your-turn cells call {called}"
    solutions = importlib.import_module(f"solutions.{module}")
    for cell in cells:
        functions = defined_functions(cell.source)
        assert cell.id == f"your-turn-{functions[0]}", cell.id
        assert all(hasattr(solutions, name) for name in functions), functions
        assert cell.source.count("raise NotImplementedError  # your code here") == len(functions)
        assert NOT_WRITTEN.fullmatch(printed(cell)), f"{cell.id}: {printed(cell)}"
        assert [output.output_type for output in cell.outputs] == ["stream"], cell.id
        assert not cell.source.rstrip().endswith(";"), f"{cell.id}: nothing to hide"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda path: path.name)
def test_the_worked_solutions_put_in_the_your_turn_cells_are_correct(path):
    notebook = nbformat.read(path, as_version=4)
    module = solution_module(path)
    cells = your_turn_cells(notebook)
    assert cells, f"{path.name} has no your-turn cell"
    for cell in cells:
        cell.source = with_the_solution(cell.source, module)
    NotebookClient(
        notebook, timeout=600, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    for cell in cells:
        assert printed(cell).startswith("Correct"), f"{cell.id}: {printed(cell)}"
