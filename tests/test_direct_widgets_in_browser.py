"""The widgets you drag (chapters 01 and 03) in JupyterLab in headless Chromium, as a learner
uses them: real mouse events (press, move in steps, release) and real key presses on a focused
point. After each gesture the test reads the numbers the widget displays and checks them against
the helpers' numbers, computed here, for the positions the widget displays. Chapter 14's drawing
pad has its own module, test_drawing_in_browser.py."""

import pytest
import torch
from lab_browser import (
    drag_point,
    point_centre,
    readout_rows,
    show_widget,
    skip_without_a_browser,
    wait_until_settled,
)

from helpers.attention import masked_softmax
from helpers.kernel_regression import gaussian_kernel, kernel_pooling, make_data
from helpers.scoring import SCORE_FUNCTIONS, fixed_additive_attention, scores_by_function
from helpers.widgets.ch03_scoring_functions import TABLE_NAMES

skip_without_a_browser()
pytest.importorskip("playwright.sync_api")

SHOWN = 0.0005 + 1e-9  # numbers are shown to three decimals
WIDTH = 10**-0.52  # on the width slider's grid (0.02 in log10): the browser keeps it exactly


def position(row: dict) -> tuple[float, float]:
    return float(row["x"]), float(row["y"])


def plane_weights(rows: dict, temperature: float) -> dict:
    """The three scoring functions' weights for the positions the widget shows."""
    query = torch.tensor(position(rows["q"]), dtype=torch.float64)
    keys = torch.tensor([position(row) for name, row in rows.items() if name != "q"])
    scores = scores_by_function(query, keys.double(), fixed_additive_attention(), temperature)
    return {name: masked_softmax(s[None])[0] for name, s in scores.items()}


def assert_plane_shows_the_helpers_weights(rows: dict) -> None:
    expected = plane_weights(rows, temperature=1.0)
    for index, name in enumerate(name for name in rows if name != "q"):
        for kind in SCORE_FUNCTIONS:
            shown = float(rows[name][f"{TABLE_NAMES[kind]}: weight"])
            assert abs(shown - expected[kind][index].item()) <= SHOWN, (name, kind)


PLANE_SOURCE = """from helpers.widgets import QueryKeyPlaneExplorer
plane = QueryKeyPlaneExplorer()
plane.widget"""


def test_dragging_keys_and_the_query_of_chapter_03(page, scratch_lab):
    widget = show_widget(page, scratch_lab, "plane.ipynb", PLANE_SOURCE)
    before = readout_rows(widget)
    assert_plane_shows_the_helpers_weights(before)

    drag_point(page, widget, "k2", 120, -80)
    rows = readout_rows(widget)
    (x0, y0), (x1, y1) = position(before["k2"]), position(rows["k2"])
    # the plane is 6 units across 376 pixels: 120 px right and 80 px up is about (+1.9, +1.3)
    assert x1 - x0 == pytest.approx(120 * 6 / 376, abs=0.1)
    assert y1 - y0 == pytest.approx(80 * 6 / 344, abs=0.1)
    assert_plane_shows_the_helpers_weights(rows)

    drag_point(page, widget, "q", -90, 60)
    rows = readout_rows(widget)
    assert position(rows["q"]) != position(before["q"])
    assert_plane_shows_the_helpers_weights(rows)


def test_points_dragged_off_the_plane_are_clamped_to_its_edge(page, scratch_lab):
    widget = show_widget(page, scratch_lab, "plane_clamped.ipynb", PLANE_SOURCE)
    x, y = point_centre(widget, "k4")
    drag_point(page, widget, "k4", 5 - x, 990 - y)  # to the window's corner, far off the plane
    rows = readout_rows(widget)
    assert position(rows["k4"]) == (-3.0, -3.0)
    assert_plane_shows_the_helpers_weights(rows)


def test_arrow_keys_move_the_focused_point_of_chapter_03(page, scratch_lab):
    widget = show_widget(page, scratch_lab, "plane_keys.ipynb", PLANE_SOURCE, "after = 1")
    before = position(readout_rows(widget)["q"])
    page.mouse.click(*point_centre(widget, "q"))  # a click focuses the point, moving nothing
    selected = selected_cell(page)
    for key in ("ArrowRight", "ArrowRight", "ArrowRight", "ArrowUp", "Shift+ArrowDown"):
        page.keyboard.press(key)
    wait_until_settled(page, widget)
    rows = readout_rows(widget)
    assert position(rows["q"]) == pytest.approx((before[0] + 0.3, before[1] + 0.1 - 1.0))
    assert_plane_shows_the_helpers_weights(rows)
    assert selected_cell(page) == selected  # the keys moved the point, not between cells


def selected_cell(page) -> int:
    """The index of the notebook's selected cell (the arrow keys move it in command mode)."""
    return page.evaluate(
        """() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')]
            .findIndex(cell => cell.classList.contains('jp-mod-selected'))"""
    )


POOLING_SOURCE = f"""from helpers.widgets import DragPoolingExplorer
pooling = DragPoolingExplorer(width={WIDTH!r}, query=2.5)
pooling.widget"""


def training_point(widget, name: str) -> tuple[float, float]:
    """A training point's position, as its handle names it: "t30 at (x, y)"."""
    label = widget.locator(f'.attention-direct-point[data-name="{name}"]').get_attribute(
        "aria-label"
    )
    assert label.startswith(f"{name} at (")
    x, y = label.rsplit("(", 1)[1].rstrip(")").split(", ")
    return float(x), float(y)


def assert_pooling_shows_kernel_pooling(widget, moved: dict) -> None:
    """The prediction and the five heaviest weights the widget shows are kernel_pooling's for
    the query it shows and the training points, the moved ones where it shows them."""
    data = make_data()
    keys, values = data.x_train.double().clone(), data.y_train.double().clone()
    for index, (x, y) in moved.items():
        keys[index], values[index] = x, y
    rows = readout_rows(widget)
    query = torch.tensor([float(rows["q"]["x"])], dtype=torch.float64)
    prediction, weights = kernel_pooling(query, keys, values, gaussian_kernel, WIDTH)
    assert abs(float(rows["q"]["y"]) - prediction.item()) <= SHOWN
    shown = {name: float(row["weight"]) for name, row in rows.items() if name != "q"}
    assert len(shown) == 5
    for name, weight in shown.items():
        assert abs(weight - weights[0, int(name[1:])].item()) <= SHOWN, name
    heaviest = sorted(weights[0].tolist(), reverse=True)[:5]
    assert sorted(shown.values(), reverse=True) == pytest.approx(heaviest, abs=SHOWN)


def test_dragging_the_query_and_a_training_point_of_chapter_01(page, scratch_lab):
    widget = show_widget(page, scratch_lab, "pooling.ipynb", POOLING_SOURCE)
    assert_pooling_shows_kernel_pooling(widget, {})

    drag_point(page, widget, "q", 100, -200)  # along x only: the query rides its prediction
    rows = readout_rows(widget)
    assert float(rows["q"]["x"]) == pytest.approx(2.5 + 100 * 5 / 376, abs=0.05)
    assert_pooling_shows_kernel_pooling(widget, {})

    drag_point(page, widget, "t30", -40, -120)
    moved = {30: training_point(widget, "t30")}
    assert moved[30][1] > make_data().y_train[30].item() + 2  # 120 px up is about 2.4 units
    assert_pooling_shows_kernel_pooling(widget, moved)


def test_arrow_keys_move_the_query_of_chapter_01_along_x(page, scratch_lab):
    widget = show_widget(page, scratch_lab, "pooling_keys.ipynb", POOLING_SOURCE, "after = 1")
    page.mouse.click(*point_centre(widget, "q"))
    selected = selected_cell(page)
    for key in ("ArrowLeft", "ArrowLeft", "Shift+ArrowLeft", "ArrowUp"):
        page.keyboard.press(key)
    wait_until_settled(page, widget)
    rows = readout_rows(widget)
    assert float(rows["q"]["x"]) == pytest.approx(2.5 - 1.2)
    assert_pooling_shows_kernel_pooling(widget, {})
    assert selected_cell(page) == selected
