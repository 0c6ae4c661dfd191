"""Round trip of every widget you drag or draw on, in JupyterLab in headless Chromium: from a
pointer move (or a key press) to the redrawn view that first shows it (``make bench``; with
--under-load beside a busy two-thread torch process, ``make bench-under-load``).

The widget's front end measures it (js/protocol.js keeps ``roundTrips`` on its element): a
move made while an earlier request is on its way waits for that answer and is folded into the
next request, so its time includes the wait. The drags (and the pad's stroke) move the pointer
every 16 ms, as a mouse reports at 60 Hz; the key presses come 100 ms apart.

Not a test: timings depend on the machine. It prints the median and the slowest round trip per
widget and gesture against the budget of the series, a median of 100 ms.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from explorers import LOAD  # noqa: E402 (benchmarks/explorers.py, beside this file)
from lab_browser import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    TIMEOUT_MS,
    jupyterlab,
    open_and_run_all,
    point_centre,
    wait_until_settled,
    write_notebook,
)

BUDGET_MS = 100
MOVE_EVERY_MS = 16
DRAG_MOVES = 60
KEY_PRESSES = 20


def settle(page, widget) -> None:
    """Wait until the widget's last move has been answered and drawn, and its time kept."""
    wait_until_settled(page, widget)
    page.wait_for_timeout(100)


def forget_round_trips(widget) -> None:
    widget.evaluate("element => { element.roundTrips.length = 0; }")


def round_trips(page, widget) -> list[float]:
    settle(page, widget)
    return widget.evaluate("element => [...element.roundTrips]")


def drag(page, widget, x: float, y: float) -> list[float]:
    """Press at (x, y), move in a zigzag of small steps, one every 16 ms, release."""
    forget_round_trips(widget)
    page.mouse.move(x, y)
    page.mouse.down()
    for step in range(1, DRAG_MOVES + 1):
        page.mouse.move(x + 60 * step / DRAG_MOVES, y + 40 * (step % 20) / 20)
        page.wait_for_timeout(MOVE_EVERY_MS)
    page.mouse.up()
    return round_trips(page, widget)


def press_keys(page, widget, keys: list[str]) -> list[float]:
    """Press the keys on the focused element, 100 ms apart."""
    forget_round_trips(widget)
    for key in keys:
        page.keyboard.press(key)
        page.wait_for_timeout(100)
    return round_trips(page, widget)


ARROWS = ["ArrowLeft" if press % 2 else "ArrowRight" for press in range(KEY_PRESSES)]


def drag_a_point(page, widget, point: str) -> list[float]:
    return drag(page, widget, *point_centre(widget, point))


def move_a_point_with_keys(page, widget, point: str) -> list[float]:
    widget.locator(f'.attention-direct-point[data-name="{point}"]').focus()
    return press_keys(page, widget, ARROWS)


def draw_a_stroke(page, widget) -> list[float]:
    box = widget.locator("canvas.pad-drawing").bounding_box()
    return drag(page, widget, box["x"] + 20, box["y"] + 20)


def draw_with_keys(page, widget) -> list[float]:
    widget.locator("canvas.pad-drawing").focus()
    return press_keys(page, widget, [" ", *["ArrowRight", "ArrowDown"] * (KEY_PRESSES // 2), " "])


WIDGETS = {
    "QueryKeyPlaneExplorer (ch03)": (
        "from helpers.widgets import QueryKeyPlaneExplorer\nQueryKeyPlaneExplorer().widget",
        {
            "drag": lambda page, widget: drag_a_point(page, widget, "k2"),
            "keys": lambda page, widget: move_a_point_with_keys(page, widget, "q"),
        },
    ),
    "DragPoolingExplorer (ch01)": (
        "from helpers.widgets import DragPoolingExplorer\nDragPoolingExplorer().widget",
        {
            "drag": lambda page, widget: drag_a_point(page, widget, "q"),
            "keys": lambda page, widget: move_a_point_with_keys(page, widget, "q"),
        },
    ),
    "DrawingExplorer (ch14)": (
        "from helpers.widgets import DrawingExplorer\nDrawingExplorer().widget",
        {"draw": draw_a_stroke, "keys": draw_with_keys},
    ),
}


def measure() -> bool:
    from playwright.sync_api import sync_playwright

    worst = 0.0
    print(f"{'widget':32} {'gesture':8} {'redraws':>7} {'median ms':>9} {'max ms':>7}")
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        root = Path(scratch) / "notebooks"
        root.mkdir()
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        with jupyterlab(root, Path(scratch) / "jupyter") as (base_url, token):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            for index, (name, (source, gestures)) in enumerate(WIDGETS.items()):
                write_notebook(root / f"widget{index}.ipynb", source)
                open_and_run_all(page, base_url, token, f"widget{index}.ipynb")
                widget = page.locator(".attention-direct").first
                widget.wait_for(timeout=TIMEOUT_MS)
                widget.scroll_into_view_if_needed()
                settle(page, widget)
                for gesture, run in gestures.items():
                    times = run(page, widget)
                    median = statistics.median(times)
                    worst = max(worst, median)
                    print(f"{name:32} {gesture:8} {len(times):7} {median:9.1f} {max(times):7.1f}")
        browser.close()
    verdict = "within" if worst <= BUDGET_MS else "OVER"
    print(f"round trips: slowest median {worst:.1f} ms, {verdict} the {BUDGET_MS} ms budget")
    return worst <= BUDGET_MS


def main() -> bool:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--under-load", action="store_true", help="time beside a busy torch")
    arguments = parser.parse_args()
    if not arguments.under_load:
        return measure()
    load = subprocess.Popen([sys.executable, "-c", LOAD])
    time.sleep(3)  # let it start its threads
    try:
        return measure()
    finally:
        load.kill()


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
