"""The chapters with the worked solutions (solutions/) in their "your turn" cells, as a learner
who has done every exercise has them: each cell's function definitions replaced by an import of
the worked ones, its checker calls kept."""

import ast
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(
    path
    for path in (ROOT / "notebooks").glob("*.ipynb")
    if list((ROOT / "solutions").glob(f"ch{path.name[:2]}_*.py"))
)


def solution_module(notebook: Path) -> str:
    (path,) = (ROOT / "solutions").glob(f"ch{notebook.name[:2]}_*.py")
    return path.stem


def your_turn_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.get("id", "").startswith("your-turn-")]


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


def with_worked_solutions(path: Path):
    """The notebook at path, its your-turn cells holding the worked solutions."""
    notebook = nbformat.read(path, as_version=4)
    for cell in your_turn_cells(notebook):
        cell.source = with_the_solution(cell.source, solution_module(path))
    return notebook
