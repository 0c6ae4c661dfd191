"""Every exercise with a checker has a "your turn" cell (id your-turn-<function>) right where a
learner writes: the signature, `raise NotImplementedError  # your code here` and the checker
call, stored with the checker's one-line "not written yet" answer. Put the worked solution from
solutions/ in its place and the checker says "Correct" in every one (and in the browser test,
the chapter run from the top with them)."""

import ast
import importlib
import re

import nbformat
import pytest
from nbclient import NotebookClient
from worked_solutions import (
    CHAPTERS,
    solution_module,
    with_worked_solutions,
    your_turn_cells,
)

NOT_WRITTEN = re.compile(
    r"Not yet: `\w+`( and `\w+`)? (is|are) not written yet "
    r"\((it|they) raised NotImplementedError\)\.\n"
)


def defined_functions(source: str) -> list[str]:
    return [node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)]


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
    """The chapter's first cell (its imports), then its your-turn cells holding the worked
    solutions. The browser test (tests/test_notebooks_in_browser.py) runs each chapter from the
    top with them, as a learner would."""
    notebook = with_worked_solutions(path)
    cells = your_turn_cells(notebook)
    assert cells, f"{path.name} has no your-turn cell"
    first = next(cell for cell in notebook.cells if cell.cell_type == "code")
    notebook.cells = [first, *cells]
    NotebookClient(
        notebook, timeout=600, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    for cell in cells:
        assert printed(cell).startswith("Correct"), f"{cell.id}: {printed(cell)}"
