"""Chapter 14's drawing pad in JupyterLab, in headless Chromium, as a learner uses it: a seven
drawn stroke by stroke with real mouse events (press, move in small steps, release), and a one
drawn with the keyboard's pen (arrow keys, Space); then the numbers the pad displays, checked
against helpers.vision_models' for the canvas the kernel used (read from the pad's small image).

Run alone: OMP_NUM_THREADS=1 .venv/bin/python -m pytest tests/test_drawing_in_browser.py -x -s
"""

import copy
import json

import pytest
import torch
from lab_browser import show_widget, skip_without_a_browser, wait_until_settled

from helpers.vision import MAX_INK, ink_counts, rasterise_strokes
from helpers.vision_models import BOS, EOS, cell_masks, load_vision_models, read_canvas

skip_without_a_browser()

PAD_NOTEBOOK = ["from helpers.widgets import DrawingExplorer", "DrawingExplorer().widget"]
SCREENSHOT = "/tmp/pad.png"
TOKEN_NAMES = {BOS: "<bos>", EOS: "<eos>"}


@pytest.fixture(scope="module")
def models() -> dict:
    loaded = load_vision_models()
    return {name: copy.deepcopy(loaded[name]).double() for name in ("vit", "reader")}


def expected_rows(models: dict, counts: list) -> list[list[str]]:
    """The readout's rows computed here, by the helpers, for the kernel's 24 x 24 counts: the
    reader's greedy tokens, each with the cell that holds most of its last block's
    cross-attention (averaged over heads) and that share; the ViT's guess and probability for
    each cell with ink."""
    image = torch.tensor(counts, dtype=torch.float64)[None, None] / MAX_INK  # (1, 1, 24, 24)
    reader, vit = models["reader"], models["vit"]
    with torch.no_grad():
        tokens = read_canvas(reader, image)[0].tolist()
        written = tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens
        reader(image, torch.tensor([[BOS, *written[:-1]]]))
        attention = reader.decoder[-1].cross_attention.attention_weights[0].mean(0)  # (T, 36)
        shares = attention @ cell_masks().double().T  # (T, 9)
        cells = image[0, 0].unfold(0, 8, 8).unfold(1, 8, 8).reshape(9, 1, 8, 8)
        probabilities = vit(cells).softmax(-1)  # (9, 10)
    rows = []
    for index, (token, share) in enumerate(zip(written, shares, strict=True)):
        cell = int(share.argmax())
        label = TOKEN_NAMES.get(token, str(token))
        rows.append(["reader", f"token {index + 1}", label, str(cell), f"{share[cell]:.3f}"])
    for cell in (cells.flatten(1) > 0).any(1).nonzero().flatten().tolist():
        p = probabilities[cell]
        rows.append(["ViT", f"cell {cell}", str(int(p.argmax())), str(cell), f"{p.max():.3f}"])
    return rows


def displayed(widget) -> dict:
    """What the pad shows: the counts of its small image, the readout's rows, its title and
    the token buttons, and the round trips so far (ms)."""
    return widget.evaluate(
        """el => ({
            counts: JSON.parse(el.querySelector('canvas.pad-seen').dataset.counts),
            rows: [...el.querySelectorAll('.attention-direct-readout tbody tr')]
                .map(row => [...row.cells].map(cell => cell.textContent)),
            title: el.querySelector('.attention-direct-title').textContent,
            tokens: [...el.querySelectorAll('.pad-tokens button')].map(b => b.textContent),
            roundTrips: el.roundTrips,
        })"""
    )


def test_a_seven_drawn_with_the_mouse_is_read_with_the_helpers_numbers(page, scratch_lab, models):
    widget = show_widget(page, scratch_lab, "pad_mouse.ipynb", "\n".join(PAD_NOTEBOOK))
    assert displayed(widget)["title"].startswith("nothing drawn yet")
    pad = widget.locator("canvas.pad-drawing")
    box = pad.bounding_box()
    per_cell = box["width"] / 96  # screen pixels per drawing-grid cell

    def at(x: float, y: float) -> tuple[float, float]:
        return box["x"] + x * per_cell, box["y"] + y * per_cell

    for start, end in [((6, 5), (26, 5)), ((26, 5), (12, 29))]:  # a top bar, then a diagonal
        page.mouse.move(*at(*start))
        page.mouse.down()
        steps = 20
        for step in range(1, steps + 1):
            t = step / steps
            page.mouse.move(
                *at(start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1]))
            )
        page.mouse.up()
    wait_until_settled(page, widget)
    shown = displayed(widget)
    counts = torch.tensor(shown["counts"])
    assert counts.shape == (24, 24) and counts[:8, :8].sum() > 0
    assert counts.sum() == counts[:8, :8].sum()  # all the ink in the top-left cell
    rows = expected_rows(models, shown["counts"])
    assert shown["rows"] == rows
    assert rows[0][:4] == ["reader", "token 1", "7", "0"] and rows[1][2] == "<eos>"
    assert rows[-1][:4] == ["ViT", "cell 0", "7", "0"]  # both models read the seven
    assert shown["tokens"] == ["1: 7", "2: <eos>"]
    print(f"\n  mouse: {len(shown['roundTrips'])} round trips, ms: "
          f"{sorted(round(t) for t in shown['roundTrips'])}")  # fmt: skip

    widget.screenshot(path=SCREENSHOT)  # the seven's token: its attention on the seven
    second = widget.locator(".pad-tokens button").nth(1)
    second.click()  # the <eos> token's attention over the pad
    assert second.get_attribute("aria-pressed") == "true"
    assert widget.locator(".pad-tokens button").first.get_attribute("aria-pressed") == "false"

    widget.locator("button.pad-clear").click()
    wait_until_settled(page, widget)
    shown = displayed(widget)
    assert (
        shown["title"].startswith("nothing drawn yet") and not torch.tensor(shown["counts"]).any()
    )


def test_a_one_drawn_with_the_keyboard_pen_is_read_with_the_helpers_numbers(
    page, scratch_lab, models
):
    widget = show_widget(page, scratch_lab, "pad_keys.ipynb", "\n".join(PAD_NOTEBOOK))
    pad = widget.locator("canvas.pad-drawing")
    pad.focus()  # the pen starts at (16, 16), the middle of the top-left cell
    for key, times in [("ArrowRight", 16), ("ArrowDown", 11)]:  # to (48, 38), in cell 4
        for _ in range(times):
            pad.press(key)
    pad.press("Space")  # the pen down
    for _ in range(12):
        pad.press("ArrowDown")  # 2 cells a press, to (48, 62)
    pad.press("Enter")  # the pen up
    pad.press("Shift+ArrowRight")  # moves with the pen up draw nothing
    wait_until_settled(page, widget)
    shown = displayed(widget)
    strokes = [[[48, 38 + 2 * step] for step in range(13)]]
    expected_counts = ink_counts(rasterise_strokes(strokes))[0, 0].long().tolist()
    assert shown["counts"] == expected_counts  # the kernel inked exactly the keyboard's stroke
    rows = expected_rows(models, shown["counts"])
    assert shown["rows"] == rows
    assert [row[:4] for row in rows if row[0] == "ViT"] == [["ViT", "cell 4", "1", "4"]]
    assert widget.evaluate("el => el.dataset.settled") == "true"
    print(f"\n  keyboard: {len(shown['roundTrips'])} round trips, ms: "
          f"{sorted(round(t) for t in shown['roundTrips'])}")  # fmt: skip
    assert json.loads(pad.evaluate("c => JSON.stringify([c.width, c.height])")) == [384, 384]
