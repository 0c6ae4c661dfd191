"""Chapter 14's drawing pad, its Python side (helpers.widgets.DrawingExplorer): strokes in, and
the view's numbers equal to the helpers' for the same canvas (read_canvas and the reader's
cross-attention, the ViT's softmax); a blank pad and a scribble answered; bad requests answered
in the view with the drawing kept; the static figure."""

import copy
import math
import re

import numpy as np
import pytest
import torch

from helpers.vision import MAX_INK, ink_counts, rasterise_strokes
from helpers.vision_models import EOS, cell_masks, load_vision_models, read_canvas
from helpers.widgets import DrawingExplorer
from helpers.widgets.ch14_attention_across_modalities import BLANK_TITLE


def line(start, end, steps=20) -> list:
    (x0, y0), (x1, y1) = start, end
    return [[x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps] for i in range(steps + 1)]


def arc(cx, cy, rx, ry, start, end, steps=40) -> list:
    angles = np.linspace(start, end, steps + 1)
    return [[cx + rx * math.cos(a), cy + ry * math.sin(a)] for a in angles]


def in_cell(strokes: list, cell: int) -> list:
    """Strokes drawn in a 32 x 32 cell's own coordinates, moved to that cell of the pad."""
    row, col = divmod(cell, 3)
    return [[[x + 32 * col, y + 32 * row] for x, y in stroke] for stroke in strokes]


SEVEN = [line((6, 5), (26, 5)), line((26, 5), (12, 29))]
THREE = [
    arc(16, 9, 7, 6, -0.9 * math.pi, math.pi / 2),
    arc(16, 22, 8, 7, -math.pi / 2, 0.9 * math.pi),
]
ONE = [line((16, 3), (16, 29))]
SEVEN_THREE_ONE = in_cell(SEVEN, 0) + in_cell(THREE, 4) + in_cell(ONE, 8)


@pytest.fixture(scope="module")
def models() -> dict:
    return load_vision_models()


@pytest.fixture
def explorer(models) -> DrawingExplorer:
    return DrawingExplorer(models=models)


def helpers_numbers(models: dict, strokes: list) -> dict:
    """What the helpers compute for the drawing, without the explorer: the canvas, the reader's
    greedy tokens and its last block's cross-attention averaged over heads, the ViT's
    probabilities for each cell (float64 copies, as the chapter measures)."""
    reader = copy.deepcopy(models["reader"]).double()
    vit = copy.deepcopy(models["vit"]).double()
    counts = ink_counts(rasterise_strokes(strokes))  # (1, 1, 24, 24)
    image = counts / MAX_INK
    with torch.no_grad():
        tokens = read_canvas(reader, image)[0].tolist()
        written = tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens
        reader(image, torch.tensor([[10, *written[:-1]]]))
        attention = reader.decoder[-1].cross_attention.attention_weights[0].mean(0)  # (T, 36)
        cells = image[0, 0].unfold(0, 8, 8).unfold(1, 8, 8).reshape(9, 1, 8, 8)
        probabilities = vit(cells).softmax(-1)  # (9, 10)
    return {
        "counts": counts[0, 0],
        "written": written,
        "attention": attention,
        "cell_shares": attention @ cell_masks().double().T,  # (T, 9)
        "probabilities": probabilities,
        "inked": (cells.flatten(1) > 0).any(1),
    }


def kept(strokes: list) -> list:
    """The drawing as the explorer keeps it: each point rounded to a hundredth of a cell."""
    return [[[round(x, 2), round(y, 2)] for x, y in stroke] for stroke in strokes]


def test_the_view_holds_the_helpers_numbers_for_the_drawing(explorer, models):
    explorer.draw(SEVEN_THREE_ONE)
    view, state = explorer.live.view, explorer.state
    assert view["strokes"] == kept(SEVEN_THREE_ONE)
    expected = helpers_numbers(models, view["strokes"])  # the canvas the kernel computed with
    assert "problem" not in view
    assert view["counts"] == expected["counts"].long().tolist()
    torch.testing.assert_close(state["counts"], expected["counts"])
    assert state["written"] == expected["written"] == [7, 3, 1, EOS]  # the trained reader reads it
    torch.testing.assert_close(state["attention"], expected["attention"], rtol=0, atol=1e-12)
    assert [token["label"] for token in view["tokens"]] == ["7", "3", "1", "<eos>"]
    for token, attention, shares in zip(
        view["tokens"], expected["attention"], expected["cell_shares"], strict=True
    ):
        assert token["attention"] == [round(w, 3) for w in attention.tolist()]
        assert token["cell_shares"] == [round(s, 3) for s in shares.tolist()]
        assert token["most_attended_cell"] == int(shares.argmax())
    assert [token["most_attended_cell"] for token in view["tokens"][:3]] == [0, 4, 8]
    inked = expected["inked"].nonzero().flatten().tolist()
    assert inked == [0, 4, 8] and state["inked_cells"] == inked
    torch.testing.assert_close(state["probabilities"], expected["probabilities"][inked])
    assert view["guesses"] == [
        {"cell": cell, "guess": int(p.argmax()), "probability": round(float(p.max()), 3)}
        for cell, p in zip(inked, expected["probabilities"][inked], strict=True)
    ]
    assert [guess["guess"] for guess in view["guesses"]] == [7, 3, 1]  # the trained ViT too


def test_the_table_shows_the_views_numbers(explorer, models):
    explorer.draw(SEVEN_THREE_ONE)
    view = explorer.live.view
    expected = helpers_numbers(models, view["strokes"])
    rows = view["table"]["rows"]
    reader_rows = [row for row in rows if row[0] == "reader"]
    vit_rows = [row for row in rows if row[0] == "ViT"]
    assert len(reader_rows) == 4 and len(vit_rows) == 3
    for index, (row, shares) in enumerate(zip(reader_rows, expected["cell_shares"], strict=True)):
        cell = int(shares.argmax())
        assert row == ["reader", f"token {index + 1}", row[2], str(cell), f"{shares[cell]:.3f}"]
    for row, cell in zip(vit_rows, [0, 4, 8], strict=True):
        p = expected["probabilities"][cell]
        assert row == ["ViT", f"cell {cell}", str(int(p.argmax())), str(cell), f"{p.max():.3f}"]
    assert view["title"].startswith("the reader writes 7 3 1 <eos>; the ViT sees 7 in cell 0")


def test_numbers_do_not_depend_on_the_thread_count(models):
    explorer = DrawingExplorer(SEVEN_THREE_ONE, models=models)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        twin = DrawingExplorer(SEVEN_THREE_ONE, models=models)
    finally:
        torch.set_num_threads(before)
    assert twin.live.view == explorer.live.view
    assert torch.equal(twin.state["attention"], explorer.state["attention"])


def test_a_blank_pad_answers_nothing_drawn_yet(explorer):
    view = explorer.live.view
    assert view["title"] == BLANK_TITLE and "problem" not in view
    assert view["strokes"] == [] and view["guesses"] == []
    assert np.asarray(view["counts"]).shape == (24, 24) and not np.asarray(view["counts"]).any()
    assert [token["label"] for token in view["tokens"]] == ["<eos>"]  # the reader writes nothing
    explorer.draw(SEVEN_THREE_ONE)
    assert explorer.live.view["title"] != BLANK_TITLE
    explorer.clear()  # from Python: the pad adopts the kernel's empty drawing
    assert explorer.live.view["title"] == BLANK_TITLE and explorer.live.view["strokes"] == []
    assert explorer.strokes == [] and not explorer.state["counts"].any()
    explorer.draw([[], []])  # empty strokes: blank too
    assert explorer.live.view["title"] == BLANK_TITLE


def test_a_scribble_gets_an_answer_not_an_error(explorer):
    generator = np.random.default_rng(0)
    scribble = [(48 + generator.normal(0, 25, (400, 2)).cumsum(0) / 5).tolist() for _ in range(3)]
    explorer.draw(scribble)
    view = explorer.live.view
    assert "problem" not in view and view["title"].startswith("the reader writes")
    assert len(view["guesses"]) >= 5 and view["tokens"]
    for token in view["tokens"]:
        assert len(token["attention"]) == 36 and math.isclose(
            sum(token["attention"]), 1, abs_tol=0.02
        )
        assert all(0 <= w <= 1 for w in token["attention"])
    for guess in view["guesses"]:
        assert 0 <= guess["guess"] <= 9 and 0.1 <= guess["probability"] <= 1
    explorer.draw([[[0, 0], [96, 96], [0, 96], [96, 0], [0, 0]] * 15])  # ink everywhere
    assert "problem" not in explorer.live.view and len(explorer.live.view["guesses"]) == 9


def test_points_off_the_pad_are_clamped_and_rounded_in_the_view(explorer):
    explorer.draw([[[-20, 5.123456], [140, 50]], [[30.005, -1e9]]])
    assert explorer.live.view["strokes"] == [[[0.0, 5.12], [96.0, 50.0]], [[30.0, 0.0]]]
    assert explorer.strokes == [[(0.0, 5.12), (96.0, 50.0)], [(30.0, 0.0)]]


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        ({"strokes": "7"}, "strokes must be a list of strokes, each a list of [x, y] points"),
        ({"strokes": [[["a", 1]]]}, "each point must be [x, y], two numbers; stroke 0 holds"),
        ({"strokes": [[[float("nan"), 1]]]}, "two finite numbers; stroke 0 holds [nan, 1]"),
        ({"strokes": [[[1, 2]] * 20_001]}, "at most 20,000 points in all"),
        ({"strokes": None}, "got NoneType"),
        (
            {"points": {"q": [1, 2]}},
            "expected {'strokes': [[[x, y], ...], ...]}, got the keys ['points']",
        ),
        ({}, "expected {'strokes'"),
    ],
    ids=str,
)
def test_a_bad_request_is_a_problem_in_the_view_and_the_drawing_stays(explorer, request_, words):
    explorer.draw(SEVEN_THREE_ONE)
    before_view, before_state = explorer.live.view, explorer.state
    explorer.live.request = {"seq": explorer._seq + 1, **request_}
    view = explorer.live.view
    assert view["problem"].startswith("that move could not be taken") and words in view["problem"]
    assert view["seq"] == before_view["seq"] + 1  # answered, so the pad sends its next move
    assert {key: view[key] for key in before_view if key not in ("seq", "problem")} == {
        key: value for key, value in before_view.items() if key not in ("seq", "problem")
    }
    assert explorer.state["written"] == before_state["written"]
    assert torch.equal(explorer.state["counts"], before_state["counts"])
    explorer.draw(in_cell(SEVEN, 2))  # the next good drawing clears the problem
    assert "problem" not in explorer.live.view and explorer.state["inked_cells"] == [2]


def test_each_answer_carries_the_number_of_the_request_it_answers(explorer):
    explorer.live.request = {"seq": 7, "strokes": in_cell(ONE, 1)}
    assert explorer.live.view["seq"] == 7 and explorer.state["inked_cells"] == [1]
    explorer.draw(in_cell(ONE, 3))
    assert explorer.live.view["seq"] == 8 and explorer.state["inked_cells"] == [3]


def test_a_drawing_to_start_from_and_the_learners_models_untouched(models):
    explorer = DrawingExplorer(in_cell(SEVEN, 4), models=models)
    assert explorer.state["inked_cells"] == [4] and explorer.live.view["guesses"][0]["guess"] == 7
    assert models["reader"].head.weight.dtype == torch.float32  # the float64 copies are its own
    assert "DrawingExplorer(2 strokes, 42 points)" == repr(explorer)


def _broken(change: str, models: dict) -> object:
    if change == "not a dict":
        return ["vit", "reader"]
    broken = dict(models)
    if change == "no vit":
        del broken["vit"]
    elif change == "vit is a reader":
        broken["vit"] = models["reader"]
    elif change == "nan vit":
        broken["vit"] = copy.deepcopy(models["vit"])
        with torch.no_grad():
            broken["vit"].head.weight[0, 0] = float("nan")
    return broken


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"models": "not a dict"}, TypeError, "models must be the dict helpers.vision_models"),
        ({"models": "no vit"}, ValueError, "models lacks ['vit']: it must hold a 'vit'"),
        ({"models": "vit is a reader"}, TypeError, "models['vit'] must be a VisionTransformer"),
        ({"models": "nan vit"}, ValueError, "models['vit'] holds NaN or inf in head.weight"),
        ({"strokes": "7"}, TypeError, "strokes must be a list of strokes"),
        ({"strokes": [[[1, float("inf")]]]}, ValueError, "two finite numbers"),
    ],
    ids=str,
)
def test_the_explorer_names_what_it_needs(models, arguments, error, words):
    arguments = dict(arguments)
    arguments["models"] = _broken(arguments.get("models"), models)
    with pytest.raises(error, match=re.escape(words)):
        DrawingExplorer(**arguments)


def test_the_static_figure_draws_the_drawing_the_canvas_and_the_first_tokens_attention(explorer):
    explorer.draw(SEVEN_THREE_ONE)
    figure = explorer.static_figure()
    drawn, seen, colour_bar = figure.axes
    assert "what you drew" in drawn.get_title() and "what the models see" in seen.get_title()
    assert drawn.get_xlabel() and seen.get_ylabel()
    assert colour_bar.get_ylabel() == "attention as it writes 7"
    assert figure._suptitle.get_text().startswith("the reader writes 7 3 1")
    picture, overlay = seen.get_images()
    np.testing.assert_array_equal(picture.get_array(), np.asarray(explorer.live.view["counts"]))
    painted = np.asarray(overlay.get_array())  # each patch's weight over its 4 x 4 pixels
    attention = explorer.live.view["tokens"][0]["attention"]
    assert painted[0, 0] == attention[0] and painted[23, 23] == attention[35]
    np.testing.assert_array_equal(
        drawn.get_images()[0].get_array(), rasterise_strokes(kept(SEVEN_THREE_ONE)).numpy()
    )
    labels = [text.get_text() for text in seen.texts]
    assert labels == [
        f"ViT: {d} (p {g['probability']:.2f})"
        for d, g in zip([7, 3, 1], explorer.live.view["guesses"], strict=True)
    ]
    assert explorer._repr_png_().startswith(b"\x89PNG")


def test_the_static_figure_shows_a_problem_and_a_blank_pad(explorer):
    assert explorer.static_figure()._suptitle.get_text() == BLANK_TITLE
    explorer.draw("a seven")
    title = explorer.static_figure()._suptitle
    assert (
        title.get_text().startswith("⚠ that move could not be taken")
        and title.get_color() == "tab:red"
    )
    assert explorer._repr_png_().startswith(b"\x89PNG")
