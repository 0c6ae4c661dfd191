import os

import matplotlib
import pytest
import torch

from helpers.exercises.framework import Verdict

matplotlib.use("Agg")

# Under pytest-xdist each worker gets its share of the cores for torch, and so do the notebook
# kernels it starts: two workers of two threads each on two cores made training tests 4x slower.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    threads = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


@pytest.fixture(autouse=True)
def seeded():
    """Every test sees the same random numbers, so a failure can be replayed."""
    torch.manual_seed(0)


@pytest.fixture
def run_checker(capsys):
    """run_checker(checker, answer) -> (verdict, what the checker printed)."""

    def run(checker, answer) -> tuple[bool, str]:
        verdict = checker(answer)
        assert isinstance(verdict, Verdict), f"a checker returned {verdict!r}, not a Verdict"
        return bool(verdict), capsys.readouterr().out

    return run


# The browser tests' fixtures (tests/lab_browser.py drives JupyterLab): one Chromium per
# module, one profile per module as a learner has (JupyterLab's assets cached after the first
# notebook; ?reset in each URL gives every notebook a fresh workspace), a fresh page per test.


@pytest.fixture(scope="module")
def browser():
    from lab_browser import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def context(browser):
    from lab_browser import VIEW_SIGNATURE_JS

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(VIEW_SIGNATURE_JS)
    yield context
    context.close()


@pytest.fixture
def page(context):
    page = context.new_page()
    yield page
    page.close()


@pytest.fixture(scope="module")
def scratch_lab(tmp_path_factory):
    """JupyterLab serving an empty folder, for notebooks a test writes (lab_browser.show_widget):
    (its base URL, its token, the folder)."""
    from lab_browser import jupyterlab

    root = tmp_path_factory.mktemp("scratch_notebooks")
    with jupyterlab(root, tmp_path_factory.mktemp("scratch_jupyter")) as (base_url, token):
        yield base_url, token, root
