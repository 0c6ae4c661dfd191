"""Every notebook, run in JupyterLab in a real browser as a learner would.

First, the address `make lab` prints must open on chapter 01 with no prompt about Jupyter
news over it (this environment's Jupyter configuration, jupyter-env/, switches it off).
Then for each notebook, its your-turn cells holding the worked solutions (solutions/): open
it, Run All, check that no cell failed, that every exercise's checker says Correct and every
widget rendered, then move each control of each explorer once and check that the figure
(or text) it drives changed. A screenshot per notebook lands in artifacts/browser/.
Two notebooks made here, with a broken widget and a failing cell, a bare /lab address and
a user who asks to be asked about news prove the checks can fail.
Run alone with `make test-browser`.
"""

import shutil
import time
from pathlib import Path

import nbformat
import pytest
from lab_browser import (
    error_outputs,
    exercise_explorer,
    jupyterlab,
    news_prompts,
    open_and_run_all,
    open_first_view,
    printed_outputs,
    set_user_setting,
    skip_without_a_browser,
    stored_widget_count,
    widget_outputs,
    write_notebook,
)
from worked_solutions import CHAPTERS, with_worked_solutions, your_turn_cells

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SCREENSHOTS = ROOT / "artifacts" / "browser"

skip_without_a_browser()


BROKEN_WIDGET = """
import io
import ipywidgets as widgets
from matplotlib.figure import Figure

figure = Figure(figsize=(2, 2))
figure.subplots().plot([0, 1], [0, 1])
png = io.BytesIO()
figure.savefig(png, format="png")
slider = widgets.IntSlider(description="does nothing")
image = widgets.Image(value=png.getvalue(), format="png")
widgets.VBox([widgets.HBox([slider]), image])  # nobody observes the slider
"""


WRONG_ANSWER = (
    "from helpers.exercises import check_masked_softmax",
    "def masked_softmax(scores, mask):\n    return scores.softmax(-1)  # the mask left out",
    "check_masked_softmax(masked_softmax)",
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab for the module, serving copies of the notebooks (autosave must not
    touch the stored outputs) with the worked solutions in their your-turn cells, as a learner
    who has done every exercise has them, plus the two notebooks that must fail."""
    root = tmp_path_factory.mktemp("notebooks")
    for notebook in NOTEBOOKS:
        if notebook in CHAPTERS:
            nbformat.write(with_worked_solutions(notebook), root / notebook.name)
        else:
            shutil.copy(notebook, root)
    write_notebook(root / "broken_widget.ipynb", BROKEN_WIDGET)
    write_notebook(root / "failing_cell.ipynb", "x = 1", "1 / 0", "y = 2")
    write_notebook(root / "wrong_answer.ipynb", *WRONG_ANSWER)
    with jupyterlab(root, tmp_path_factory.mktemp("jupyter")) as (base_url, token):
        yield base_url, token


FIRST_CHAPTER = "01_attention_pooling.ipynb"
NOTIFICATION_SETTINGS = "@jupyterlab/apputils-extension:notification"


@pytest.fixture
def first_start(tmp_path_factory):
    """A JupyterLab of its own, as a learner's first start finds it (the module's lab has
    opened other notebooks by then, in whatever order pytest-xdist hands them out)."""
    root = tmp_path_factory.mktemp("first_start")
    shutil.copy(ROOT / "notebooks" / FIRST_CHAPTER, root)
    with jupyterlab(root, tmp_path_factory.mktemp("first_start_jupyter")) as (base_url, token):
        yield base_url, token


def test_lab_opens_on_chapter_01_with_no_news_prompt(first_start, page):
    assert open_first_view(page, *first_start) == FIRST_CHAPTER
    assert news_prompts(page) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.name for n in NOTEBOOKS])
def test_notebook_runs_and_its_widgets_work(lab, page, notebook):
    start = time.monotonic()
    open_and_run_all(page, *lab, notebook.name)
    ran = time.monotonic() - start
    assert error_outputs(page) == [], "a cell failed or wrote to stderr"
    exercises = len(your_turn_cells(nbformat.read(notebook, as_version=4)))
    correct = [text for text in printed_outputs(page) if text.startswith("Correct: all")]
    assert len(correct) == exercises, "a worked solution in its your-turn cell is not Correct"

    explorers, broken = widget_outputs(page)
    assert broken == [], "a widget failed to render"
    assert len(explorers) == stored_widget_count(notebook), "not every widget rendered"
    failures = [
        f"widget {index}: {problem}"
        for index, explorer in enumerate(explorers)
        for problem in exercise_explorer(page, explorer)
    ]
    assert failures == []

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    if explorers:
        explorers[0].scroll_into_view_if_needed()
    page.screenshot(path=SCREENSHOTS / f"{notebook.stem}.png")
    elapsed = time.monotonic() - start
    print(
        f"{notebook.name}: {elapsed:.1f} s in the browser, {ran:.1f} s of it to open and "
        f"Run All (a report, not a test: time budgets are checked by make bench)"
    )


def test_a_widget_that_redraws_nothing_is_caught(lab, page):
    open_and_run_all(page, *lab, "broken_widget.ipynb")
    explorers, _ = widget_outputs(page)
    assert len(explorers) == 1
    problems = exercise_explorer(page, explorers[0], timeout_ms=3000)
    assert problems == ["slider 0: the view it drives did not change"]


def test_a_wrong_answer_is_told_from_a_correct_one(lab, page):
    open_and_run_all(page, *lab, "wrong_answer.ipynb")
    (verdict,) = printed_outputs(page)
    assert verdict.startswith("Not yet: ")


def test_a_failing_cell_is_caught(lab, page):
    open_and_run_all(page, *lab, "failing_cell.ipynb")
    errors = error_outputs(page)
    assert len(errors) == 1 and "ZeroDivisionError" in errors[0]


def test_a_bare_lab_address_is_told_from_chapter_01(lab, page):
    assert open_first_view(page, *lab, path="/lab?reset") == "Launcher"


def test_a_news_prompt_is_caught(lab, page):
    set_user_setting(*lab, NOTIFICATION_SETTINGS, '{"fetchNews": "none"}')  # "ask me"
    try:
        open_first_view(page, *lab)
        prompts = news_prompts(page)
    finally:
        set_user_setting(*lab, NOTIFICATION_SETTINGS, "{}")
    assert len(prompts) == 1 and "notified about official Jupyter news" in prompts[0]
