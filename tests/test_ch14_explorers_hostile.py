"""Regression tests from a hostile pass over chapter 14's explorers (issue 31): torch's global
random numbers left alone by building and redrawing them, the compose box showing the layout
drawn, models no explorer can use refused by name, and drawing_figure naming what a view must
hold."""

import copy
import io
import re
import warnings

import numpy as np
import pytest
import torch

from helpers.vision import MAX_INK
from helpers.vision_models import (
    CanvasReader,
    DigitFinder,
    VisionTransformer,
    finder_test_set,
    float64_copy,
)
from helpers.widgets import CanvasExplorer, DrawingExplorer
from helpers.widgets.ch14_attention_across_modalities import (
    TITLE_LINES,
    cell_mass,
    compose_canvas,
    drawing_figure,
    first_test_images,
    layout_text,
    most_attended_cell,
    parse_layout,
    read_with_attention,
)


@pytest.fixture(scope="module")
def tiny() -> dict:
    torch.manual_seed(14)
    return {
        "vit": VisionTransformer(8, 2, 1, 8),
        "finder": DigitFinder(8),
        "reader": CanvasReader(8, 2, 1, 1, 8),
    }


SEVEN_AND_ONE = [[[6, 5], [26, 5], [12, 29]], [[80, 67], [80, 93]]]


def _unchanged(call) -> bool:
    before = torch.random.get_rng_state()
    call()
    return torch.equal(torch.random.get_rng_state(), before)


# Torch's global random numbers: building an explorer rebuilt its models through their
# constructors, and loading the shipped models did too


def test_building_the_explorers_leaves_torchs_random_numbers_alone(tiny):
    assert _unchanged(lambda: CanvasExplorer(models=tiny))
    assert _unchanged(lambda: CanvasExplorer(mode="read", layout="7 . . . 3 . . . 1", models=tiny))
    assert _unchanged(lambda: DrawingExplorer(SEVEN_AND_ONE, models=tiny))


def test_building_the_explorers_with_the_shipped_models_leaves_them_alone():
    assert _unchanged(CanvasExplorer)
    assert _unchanged(DrawingExplorer)


@pytest.mark.parametrize(
    ("control", "value"),
    [
        ("word", "three"),
        ("canvas", 7),
        ("layout", "4 . 2 . . . . . 9"),
        ("source", "composed"),
        ("mode", "read"),
        ("token", 1),
    ],
)
def test_moving_a_control_of_the_canvas_explorer_leaves_them_alone(tiny, control, value):
    explorer = CanvasExplorer(mode="read" if control == "token" else "find", models=tiny)
    assert _unchanged(lambda: setattr(explorer.controls[control], "value", value))
    assert explorer.values()[control] == value and "error" not in explorer.state


def test_drawing_on_the_pad_and_its_figure_leave_them_alone(tiny):
    explorer = DrawingExplorer(models=tiny)
    assert _unchanged(lambda: explorer.draw(SEVEN_AND_ONE))
    assert _unchanged(explorer.clear)
    assert _unchanged(lambda: explorer.draw("not strokes"))  # refused in the view
    assert _unchanged(explorer._repr_png_)


# Buffers state_dict leaves out: an edit by hand reaches the explorers' float64 copies (they
# were rebuilt fresh, and the explorer showed another model)


def test_the_explorers_use_the_buffers_their_models_hold(tiny):
    edited = copy.deepcopy(tiny)
    edited["vit"].embed.positions.normal_()
    edited["finder"].local.fill_(True)
    edited["reader"].positions.normal_()
    canvas = CanvasExplorer(models=edited)
    assert torch.equal(canvas.finder.local, edited["finder"].local)
    assert torch.equal(canvas.reader.positions, edited["reader"].positions.double())
    drawing = DrawingExplorer(models=edited)
    assert torch.equal(drawing.vit.embed.positions, edited["vit"].embed.positions.double())
    assert torch.equal(drawing.reader.positions, edited["reader"].positions.double())


# The compose box shows the layout the figure draws (it showed "7 . . . 3 . . . 1" over the
# first test canvas)


def test_the_compose_box_shows_the_layout_of_the_test_canvas_drawn(tiny):
    digits = finder_test_set(50)[0].digits
    explorer = CanvasExplorer(canvas=4, models=tiny)
    assert parse_layout(explorer.values()["layout"]).tolist() == digits[4].tolist()
    assert explorer.state["digits"] == digits[4].tolist()
    explorer.controls["canvas"].value = 9
    assert explorer.values()["layout"] == layout_text(digits[9])
    assert explorer.state["digits"] == digits[9].tolist()
    explorer.controls["layout"].value = "5 . . . . . . . 6"  # typed: shown and drawn
    assert explorer.values()["source"] == "composed"
    assert explorer.state["digits"] == parse_layout("5 . . . . . . . 6").tolist()
    assert explorer.values()["layout"] == "5 . . . . . . . 6"
    explorer.controls["source"].value = "test"  # back to the test canvas, and its layout
    assert explorer.values()["layout"] == layout_text(digits[9])
    assert explorer.state["digits"] == digits[9].tolist()
    explorer.controls["source"].value = "composed"  # composes what the box shows
    assert explorer.state["canvas"] is None and explorer.state["digits"] == digits[9].tolist()


@pytest.mark.parametrize("low_high", [(0, 1000), (-5, 49)])
def test_a_canvas_the_slider_is_moved_past_is_named_and_the_compose_box_kept(tiny, low_high):
    """Past the slider's range a canvas raised IndexError from the observer, and below 0 the
    compose box showed the layout of a canvas counted from the end."""
    explorer = CanvasExplorer(canvas=4, models=tiny)
    layout = explorer.values()["layout"]
    slider = explorer.controls["canvas"]
    slider.min, slider.max = low_high
    slider.value = 500 if low_high[1] == 1000 else -3
    assert re.match(r"canvas must be .*, got (500|-3)$", explorer.state["error"])
    assert explorer.values()["layout"] == layout


def test_a_layout_given_is_kept_in_the_compose_box(tiny):
    explorer = CanvasExplorer(layout="7 . . . 3 . . . 1", models=tiny)
    assert explorer.values()["layout"] == "7 . . . 3 . . . 1"
    assert explorer.state["digits"] == [7, -1, -1, -1, 3, -1, -1, -1, 1]


@pytest.mark.parametrize(
    "settings",
    [
        dict(canvas=3, word="three", mode="find"),
        dict(canvas=0, mode="read", token=2),
        dict(layout="7 . . 7 . . . . 1", word="one", mode="find"),
    ],
)
def test_the_canvas_explorer_shows_the_call_that_rebuilds_it(tiny, settings):
    explorer = CanvasExplorer(models=tiny, **settings)
    shown = repr(explorer)
    assert "source=" not in shown
    rebuilt = eval(shown, {"CanvasExplorer": lambda **kw: CanvasExplorer(models=tiny, **kw)})
    assert rebuilt.values() == explorer.values()


def test_layout_text_is_what_parse_layout_reads():
    for digits in finder_test_set(50)[0].digits:
        assert torch.equal(parse_layout(layout_text(digits)), digits)


# Models no explorer can use: named, never torch's own error


def _broken(model, how: str):
    twin = float64_copy(model).float()
    if how == "meta":
        return twin.to("meta")
    twin.sizes = dict(twin.sizes, d_model=12)
    return twin


@pytest.mark.parametrize(
    ("how", "words"),
    [
        ("meta", "holds .* on the meta device: it has shapes but no weights"),
        ("sizes changed", "the model's weights do not fit its sizes"),
    ],
)
@pytest.mark.parametrize(
    ("explorer", "name"),
    [(CanvasExplorer, "finder"), (CanvasExplorer, "reader"), (DrawingExplorer, "vit")],
    ids=["canvas explorer's finder", "canvas explorer's reader", "drawing explorer's ViT"],
)
def test_a_model_the_explorers_cannot_use_is_refused_by_name(tiny, how, words, explorer, name):
    models = dict(tiny, **{name: _broken(tiny[name], how)})
    with pytest.raises(ValueError, match=words):
        explorer(models=models)


def test_cell_mass_and_read_with_attention_name_what_they_take(tiny):
    with pytest.raises(ValueError, match=r"attention must be a tensor \(36,\), a weight per patch"):
        cell_mass(torch.full((20,), 0.05), 3)
    with pytest.raises(ValueError, match=r"got \[0.5, 0.5\]"):
        cell_mass([0.5, 0.5], 3)
    reader = float64_copy(tiny["reader"])
    with pytest.raises(ValueError, match=r"image must be a float64 canvas \(1, 1, 24, 24\)"):
        read_with_attention(reader, torch.zeros(2, 1, 24, 24, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"image must be a float64 canvas .* got torch.float32"):
        read_with_attention(reader, torch.zeros(1, 1, 24, 24))
    with pytest.raises((TypeError, ValueError), match=r"^image must be a torch.Tensor \(1, 1, 24"):
        read_with_attention(reader, [[0.0] * 24] * 24)
    with pytest.raises(ValueError, match=r"must hold pixels in 0..1, as load_digits scales"):
        read_with_attention(reader, torch.full((1, 1, 24, 24), MAX_INK, dtype=torch.float64))


# drawing_figure: a view it cannot draw is named (KeyError: 'pad' before), never drawn wrong


@pytest.fixture(scope="module")
def view(tiny) -> dict:
    return dict(DrawingExplorer(SEVEN_AND_ONE, models=tiny).live.view)


def _without(view: dict, key: str) -> dict:
    return {name: value for name, value in view.items() if name != key}


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (lambda v: [1, 2], TypeError, "got a list"),
        (lambda v: {}, ValueError, "it lacks ['strokes', 'pad', 'counts', 'tokens', 'guesses']"),
        (lambda v: _without(v, "pad"), ValueError, "it lacks ['pad']"),
        (lambda v: _without(v, "counts"), ValueError, "it lacks ['counts']"),
        (lambda v: _without(v, "tokens"), ValueError, "it lacks ['tokens']"),
        (lambda v: _without(v, "guesses"), ValueError, "it lacks ['guesses']"),
        (lambda v: _without(v, "strokes"), ValueError, "it lacks ['strokes']"),
        (lambda v: {**v, "pad": 96}, ValueError, "its 'pad' is 96"),
        (lambda v: {**v, "pad": {"size": 96}}, ValueError, "its 'pad' is {'size': 96}"),
        (lambda v: {**v, "counts": [[0] * 3] * 3}, ValueError, "not 24 rows of 24 counts 0..16"),
        (
            lambda v: {**v, "counts": [[0] * 24] * 23 + [[0] * 5]},
            ValueError,
            "its 'counts' are not 24 rows",
        ),
        (lambda v: {**v, "counts": [[float("nan")] * 24] * 24}, ValueError, "counts 0..16"),
        (lambda v: {**v, "counts": [[17] * 24] * 24}, ValueError, "counts 0..16"),
        (
            lambda v: {**v, "tokens": [{**v["tokens"][0], "attention": [0.1] * 5}]},
            ValueError,
            "its 'tokens' are not that, with 36 weights each",
        ),
        (
            lambda v: {**v, "tokens": [{"attention": v["tokens"][0]["attention"]}]},
            ValueError,
            "its 'tokens' are not that",
        ),
        (
            lambda v: {**v, "guesses": [{"cell": 99, "guess": 1, "probability": 0.5}]},
            ValueError,
            "its 'guesses' are not that, cells 0..8",
        ),
        (
            lambda v: {**v, "guesses": [{"cell": 0, "guess": 1, "probability": "x"}]},
            ValueError,
            "its 'guesses' are not that",
        ),
        (
            lambda v: {**v, "guesses": v["guesses"] * 2000},
            ValueError,
            "its 'guesses' are 4000, more than its 9 cells",
        ),  # 2,000 copies of a guess took seconds to draw, each a label over the others
        (
            lambda v: {**v, "pad": {**v["pad"], "cells": 0}},
            ValueError,
            "the view's pad cells must be a whole number >= 1, got 0",
        ),
        (
            lambda v: {**v, "pad": {**v["pad"], "size": "96"}},
            ValueError,
            "the view's pad size must be a whole number >= 1, got '96'",
        ),
        (
            lambda v: {**v, "pad": {**v["pad"], "size": 8192}},
            ValueError,
            "its pad's size must be 96 for 3 cells, got 8192",
        ),
        (lambda v: {**v, "title": 5}, ValueError, "its 'title' must be text, got 5"),
        (lambda v: {**v, "strokes": "abc"}, TypeError, "strokes must be a list of strokes"),
        (
            lambda v: {**v, "title": "a\ud800"},
            ValueError,
            "its 'title' must be text, got 'a\\ud800': a str that encodes as UTF-8",
        ),
        (
            lambda v: {**v, "problem": "\udfff"},
            ValueError,
            "its 'problem' must be text, got '\\udfff': a str that encodes as UTF-8",
        ),
        (
            lambda v: {**v, "tokens": [{**v["tokens"][0], "label": "7\ud800"}]},
            ValueError,
            "its 'tokens' are not that",
        ),  # matplotlib's font code refused each lone surrogate when the figure was drawn
    ],
    ids=["a list", "empty", "no pad", "no counts", "no tokens", "no guesses", "no strokes",
         "pad a number", "pad without cells", "counts 3 x 3", "counts ragged", "counts NaN",
         "counts 17", "attention short", "token without label", "guess cell 99",
         "probability text", "more guesses than cells", "cells 0", "size text", "size 8192",
         "title a number", "strokes text", "title surrogate", "problem surrogate",
         "label surrogate"],
)  # fmt: skip
def test_drawing_figure_names_what_a_view_must_hold(view, change, error, words):
    with pytest.raises(error, match=re.escape(words)):
        drawing_figure(change(copy.deepcopy(view)))


def test_drawing_figure_says_what_a_view_holds():
    with pytest.raises(ValueError) as refused:
        drawing_figure({})
    message = str(refused.value)
    assert message.startswith("a view must be the dict a DrawingExplorer's pad shows")
    for part in ("'strokes'", "'pad'", "'counts'", "'tokens'", "'guesses'", "ink counts 0..16"):
        assert part in message, part


@pytest.mark.parametrize(
    "change",
    [
        lambda v: v,
        lambda v: {**v, "tokens": []},
        lambda v: {**v, "problem": "that move could not be taken"},
        lambda v: {**v, "counts": np.full((24, 24), 0.5).tolist()},
        lambda v: _without(v, "title"),
    ],
    ids=["the view", "no tokens yet", "a problem", "counts as floats", "no title"],
)
def test_drawing_figure_draws_every_view_the_pad_can_show(view, change):
    figure = drawing_figure(change(copy.deepcopy(view)))
    assert len(figure.axes) >= 2


# A second hostile pass: typed '$' reached matplotlib's mathtext, a view without a title, ints
# too large to print, and attention that cannot be weights answered with a number


def test_a_drawing_quoting_a_dollar_sign_is_drawn_with_its_problem(tiny):
    explorer = DrawingExplorer(models=tiny)
    explorer.draw([[["$\\frac{", "$"]]])
    assert "stroke 0 holds" in explorer.live.view["problem"]
    assert explorer._repr_png_()[:4] == b"\x89PNG"
    view = dict(explorer.live.view, problem=None)
    token = dict(view["tokens"][0], label="$\\frac{$")
    drawing_figure({**view, "tokens": [token]}).savefig(io.BytesIO(), format="png")


@pytest.mark.parametrize("key", ["title", "problem"])
@pytest.mark.parametrize("text", ["word " * 600, "w" * 3000])
def test_a_very_long_title_or_problem_is_cut_to_a_few_lines(view, key, text):
    """3,000 characters wrapped whole left constrained layout no room: the figure collapsed."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied"
        figure = drawing_figure({**view, key: text})
        figure.savefig(io.BytesIO(), format="png")
    shown = figure.get_suptitle()
    assert shown.endswith("…") and shown.count("\n") < TITLE_LINES


def test_a_view_whose_title_is_none_is_drawn(tiny):
    view = DrawingExplorer(SEVEN_AND_ONE, models=tiny).live.view
    drawing_figure({**view, "title": None}).savefig(io.BytesIO(), format="png")


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda tiny: CanvasExplorer(canvas=10**5000, models=tiny), "canvas must be one of"),
        (lambda tiny: CanvasExplorer(token=10**5000, models=tiny), "token an int too large"),
        (
            lambda tiny: drawing_figure(
                {**DrawingExplorer(models=tiny).live.view, "pad": {"size": 96, "cells": 10**5000}}
            ),
            "cells must be at most 32",
        ),
    ],
    ids=["canvas", "token", "view cells"],
)
def test_numbers_too_large_to_print_are_refused_by_name(tiny, call, words):
    with pytest.raises(ValueError, match=words):
        call(tiny)


UNIFORM = torch.full((36,), 1 / 36)


@pytest.mark.parametrize(
    ("attention", "words"),
    [
        (torch.empty(36, device="meta"), "meta device"),
        (torch.full((36,), float("nan")), "hold NaN"),
        (-UNIFORM, "each in 0..1"),
        (UNIFORM * 10, "sums? to 10"),  # "sums to" or "the weights sum to"
    ],
    ids=["meta", "nan", "negative", "times ten"],
)
def test_cell_mass_refuses_what_cannot_be_attention_weights(attention, words):
    for call in (lambda: cell_mass(attention, 0), lambda: most_attended_cell(attention)):
        with pytest.raises(ValueError, match=words):
            call()


def test_cell_mass_of_uniform_attention_is_a_ninth():
    assert cell_mass(UNIFORM, 4) == pytest.approx(1 / 9)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (
            lambda tiny: compose_canvas(torch.tensor([10] * 9), first_test_images()),
            r"digits must be \(9,\) labels -1..9",
        ),
        (
            lambda tiny: compose_canvas(torch.full((9,), -1), torch.zeros(9, 1, 8, 8)),
            r"\(10, 1, 8, 8\)",
        ),
        (lambda tiny: layout_text([7, -1]), "digits must be a torch.Tensor"),
        (lambda tiny: layout_text(torch.tensor([7, -1])), r"shape \(2,\)"),
        (
            lambda tiny: DrawingExplorer(models=tiny).naming(
                torch.zeros(1, 1, 16, 16, dtype=torch.float64)
            ),
            r"image must be a float64 canvas \(1, 1, 24, 24\)",
        ),
        (lambda tiny: DrawingExplorer(models=tiny).accept(None), "got a NoneType"),
    ],
    ids=["compose 10", "compose images", "layout list", "layout short", "naming", "accept"],
)
def test_the_explorers_helpers_refuse_bad_input_by_name(tiny, call, words):
    with pytest.raises((ValueError, TypeError), match=words):
        call(tiny)


# A third hostile pass: draw() and the explorer's methods called with what no control holds


@pytest.fixture(scope="module")
def canvas_explorer(tiny) -> CanvasExplorer:
    return CanvasExplorer(mode="read", models=tiny)


MODE = r"mode must be one of \['find', 'read'\], got "
WORD = r"word must be one of \['zero', 'one', .*'nine'\], got "
TOKEN = r"token must be a whole number >= 0, got "


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"mode": "look"}, MODE + "'look'"),
        ({"mode": None}, MODE + "None"),
        ({"mode": 0}, MODE + "0"),
        ({"mode": "FIND"}, MODE + "'FIND'"),
        ({"mode": "find", "word": "eleven"}, WORD + "'eleven'"),
        ({"mode": "find", "word": None}, WORD + "None"),
        ({"mode": "find", "word": 7}, WORD + "7"),
        ({"mode": "find", "word": "Seven"}, WORD + "'Seven'"),
        ({"token": -1}, TOKEN + "-1"),
        ({"token": None}, TOKEN + "None"),
        ({"token": 1.5}, TOKEN + "1.5"),
    ],
    ids=["mode look", "mode None", "mode 0", "mode FIND", "word eleven", "word None", "word 7",
         "word Seven", "token -1", "token None", "token 1.5"],
)  # fmt: skip
def test_draw_names_a_mode_a_word_or_a_token_no_control_holds(canvas_explorer, change, words):
    """A KeyError ('look'), tuple.index's "x not in tuple" (a word), the last token's attention
    captioned "token 0 of N" (-1), a TypeError (None) and a torch IndexError (1.5)."""
    with pytest.raises(ValueError, match=words):
        canvas_explorer.draw(**{**canvas_explorer.values(), **change})


SOURCE = r"source must be one of \['test', 'composed'\], got "
CANVAS = r"canvas must be (one of the first 50 test canvases, 0..49|a whole number >= 0), got "


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"source": "random"}, SOURCE + "'random'"),
        ({"source": None}, SOURCE + "None"),
        ({"source": "TEST"}, SOURCE + "'TEST'"),
        ({"canvas": 50}, CANVAS + "50"),
        ({"canvas": -1}, CANVAS + "-1"),
        ({"canvas": None}, CANVAS + "None"),
    ],
    ids=["source random", "source None", "source TEST", "canvas 50", "canvas -1", "canvas None"],
)
def test_draw_and_canvas_shown_name_a_canvas_no_control_holds(canvas_explorer, change, words):
    """Any source but "test" was drawn as the composed layout; canvas 50 and None raised an
    IndexError and a TypeError, and canvas_shown('test', -1, '') returned an empty image."""
    values = {**canvas_explorer.values(), "source": "test", "canvas": 0, **change}
    canvas_explorer.draw(**values)
    assert re.match(words, canvas_explorer.state["error"]), canvas_explorer.state["error"]
    with pytest.raises(ValueError, match=words):
        canvas_explorer.canvas_shown(values["source"], values["canvas"], "1 . . . . . . . .")


@pytest.mark.parametrize(
    ("image", "words"),
    [
        ([[0.0]], r"image must be a torch.Tensor \(1, 1, 24, 24\), got list"),
        (torch.zeros(1, 1, 24, 24), r"a float64 canvas \(1, 1, 24, 24\).*got torch.float32"),
        (torch.full((1, 1, 24, 24), 2.0, dtype=torch.float64), "pixels in 0..1"),
    ],
    ids=["a list", "float32", "pixels 2"],
)
def test_reading_names_an_image_that_is_not_a_canvas(canvas_explorer, image, words):
    """A list raised "AttributeError: 'list' object has no attribute 'numpy'"."""
    with pytest.raises(ValueError, match=words):
        canvas_explorer.reading(image)


# Regressions from a fourth hostile pass


@pytest.mark.parametrize(
    ("word", "words"),
    [(7, WORD + "7"), (None, WORD + "None"), ("Seven", WORD + "'Seven'")],
    ids=["an index", "None", "Seven"],
)
def test_finding_names_a_word_the_menu_does_not_offer(canvas_explorer, word, words):
    """finding() took the digit's index: "seven" raised "too many dimensions 'str'", None
    "Could not infer dtype of NoneType"."""
    image = canvas_explorer.canvases.images[:1].double()
    with pytest.raises(ValueError, match=words):
        canvas_explorer.finding(image, word)


def test_finding_takes_the_word_the_view_finds(canvas_explorer):
    canvas_explorer.draw(**{**canvas_explorer.values(), "mode": "find", "word": "seven"})
    image = canvas_explorer.canvases.images[:1].double()
    found = canvas_explorer.finding(image, "seven")
    assert torch.equal(found["probabilities"], canvas_explorer.state["probabilities"])


def test_finding_names_an_image_that_is_not_a_canvas(canvas_explorer):
    with pytest.raises(ValueError, match=r"a float64 canvas \(1, 1, 24, 24\).*got torch.float32"):
        canvas_explorer.finding(torch.zeros(1, 1, 24, 24), "seven")


def test_reading_a_canvas_that_requires_grad_reads_its_pixels(canvas_explorer):
    """The kept readings' key raised "Can't call numpy() on Tensor that requires grad"."""
    image = canvas_explorer.canvases.images[:1].double()
    found = canvas_explorer.reading(image.clone().requires_grad_())
    assert found["written"] == canvas_explorer.reading(image)["written"]
    assert torch.equal(found["attention"], canvas_explorer.reading(image)["attention"])


def _nested(tensor: torch.Tensor) -> torch.Tensor:
    return torch.nested.nested_tensor([tensor])


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: layout_text(_nested(torch.zeros(9, dtype=torch.long))), "got one nested"),
        (lambda: cell_mass(_nested(torch.full((36,), 1 / 36)), 0), "got one nested"),
        (
            lambda: layout_text(torch.zeros(9, dtype=torch.long).to_sparse()),
            "got one torch.sparse_coo",
        ),
    ],
    ids=["nested layout", "nested attention", "sparse layout"],
)
def test_nested_and_sparse_tensors_are_refused_by_their_layout(call, words):
    with pytest.raises(ValueError, match=f"must be an ordinary dense tensor, {words}"):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda tiny: compose_canvas(
            parse_layout("7 . . . . . . . ."), _nested(first_test_images())
        ),
        lambda tiny: read_with_attention(
            float64_copy(tiny["reader"]), _nested(torch.zeros(1, 24, 24, dtype=torch.float64))
        ),
    ],
    ids=["compose_canvas images", "read_with_attention image"],
)
def test_nested_images_are_refused_before_their_shape_is_read(tiny, call):
    with pytest.raises(ValueError, match="must be an ordinary dense tensor, got one nested"):
        call(tiny)


# What an explorer hands out is a copy: changing it changes nothing the explorer keeps


def test_a_reading_handed_out_is_a_copy_of_the_one_kept(tiny):
    """Appending to reading(image)["written"] changed the kept reading; zeroing its attention
    zeroed the kept attention."""
    explorer = CanvasExplorer(mode="read", models=tiny)
    image = explorer.canvases.images[5:6].double()
    first = explorer.reading(image)
    kept = copy.deepcopy(first)
    first["written"].append(7)
    first["attention"].zero_()
    again = explorer.reading(image)
    assert again["written"] == kept["written"]
    assert torch.equal(again["attention"], kept["attention"])


def test_changing_the_state_changes_nothing_drawn_after_it(tiny):
    """Appending to explorer.state["written"] showed an extra token after switching the mode to
    "find" and back; appending to a drawing's state["strokes"] changed the drawing."""
    explorer = CanvasExplorer(mode="read", models=tiny)
    values = explorer.values()
    written = list(explorer.state["written"])
    explorer.state["written"].append(7)
    explorer.draw(**{**values, "mode": "find"})
    explorer.draw(**values)
    assert explorer.state["written"] == written
    drawing = DrawingExplorer(SEVEN_AND_ONE, models=tiny)
    drawing.compute()
    drawing.state["strokes"].append([(1.0, 1.0)])
    assert drawing.strokes == DrawingExplorer(SEVEN_AND_ONE, models=tiny).strokes


def test_read_mode_draws_with_the_word_menu_unset():
    """Read mode, which reads every digit, asked for a word first (a twelfth hostile pass)."""
    explorer = CanvasExplorer()
    explorer.controls["word"].value = None
    explorer.controls["mode"].value = "read"
    assert "error" not in explorer.state and explorer.state["mode"] == "read"
    explorer.controls["mode"].value = "find"
    assert explorer.state == {"error": "choose a value for word"}
