"""Every notebook, run in JupyterLab in a real browser as a learner would.

First, the address `make lab` prints must open on chapter 01 with no prompt about Jupyter
news over it (this environment's Jupyter configuration, jupyter-env/, switches it off).
Then for each notebook: open it, Run All, check that no cell failed and every widget
rendered, then move each control of each explorer once and check that the figure
(or text) it drives changed. A screenshot per notebook lands in artifacts/browser/.
Two notebooks made here, with a broken widget and a failing cell, a bare /lab address and
a user who asks to be asked about news prove the checks can fail.
Run alone with `make test-browser`.
"""

import shutil
import time
from pathlib import Path

import pytest
from lab_browser import (
    error_outputs,
    exercise_explorer,
    jupyterlab,
    news_prompts,
    open_and_run_all,
    open_first_view,
    set_user_setting,
    skip_without_a_browser,
    stored_widget_count,
    widget_outputs,
    write_notebook,
)

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


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """One JupyterLab for the module, serving copies of the notebooks (autosave must not
    touch the stored outputs), plus the two notebooks that must fail."""
    root = tmp_path_factory.mktemp("notebooks")
    for notebook in NOTEBOOKS:
        shutil.copy(notebook, root)
    write_notebook(root / "broken_widget.ipynb", BROKEN_WIDGET)
    write_notebook(root / "failing_cell.ipynb", "x = 1", "1 / 0", "y = 2")
    with jupyterlab(root, tmp_path_factory.mktemp("jupyter")) as (base_url, token):
        yield base_url, token


FIRST_CHAPTER = "01_attention_pooling.ipynb"
NOTIFICATION_SETTINGS = "@jupyterlab/apputils-extension:notification"


# First in this module: the server's workspace is still as a learner's first start leaves it.
def test_lab_opens_on_chapter_01_with_no_news_prompt(lab, page):
    assert open_first_view(page, *lab) == FIRST_CHAPTER
    assert news_prompts(page) == []


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.name for n in NOTEBOOKS])
def test_notebook_runs_and_its_widgets_work(lab, page, notebook):
    start = time.monotonic()
    open_and_run_all(page, *lab, notebook.name)
    ran = time.monotonic() - start
    assert error_outputs(page) == [], "a cell failed or wrote to stderr"

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
