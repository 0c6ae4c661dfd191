"""The widgets you drag or draw on, and the helpers behind them, attacked as a hostile browser or
a careless learner would: wrong types, NaN and inf, ints too large for a float, numpy scalars,
deep nesting, damaged data and models, arguments beyond the sliders. Each case is a problem
found and fixed: a helper refuses it by name (ValueError or TypeError, never a raw error from
deep inside, never NaN returned quietly); a widget answers it in its view, never raising, its
state as it was."""

import io
import math
import re
import warnings

import numpy as np
import pytest
import torch
from matplotlib.text import Text

from helpers.kernel_regression import RegressionData, make_data
from helpers.scoring import fixed_additive_attention, scores_by_function
from helpers.vision import check_strokes, rasterise_strokes
from helpers.vision_models import load_vision_models
from helpers.widgets import DragPoolingExplorer, DrawingExplorer, QueryKeyPlaneExplorer
from helpers.widgets.direct import (
    COLOURS,
    MAX_ITEMS,
    MAX_RADIUS,
    MAX_TICKS,
    MAX_WIDTH,
    TITLE_LINES,
    moved_points,
    plane_figure,
    snap,
)

PLANE = {"x": [-3.0, 3.0], "y": [-3.0, 3.0], "step": 0.1}
HUGE = 10**400  # an int no float holds
HUGER = 10**5000  # an int Python will not even print
DEEP = [[1.0, 2.0]]
for _ in range(3000):  # past Python's recursion limit: repr itself fails
    DEEP = [DEEP]
NESTED = [[1.0, 2.0]]
for _ in range(200):  # as deep as ipywidgets echoes a request back without failing itself
    NESTED = [NESTED]


def short(value: object) -> str:
    """A test id: the value's repr, cut short (an int past 4,300 digits has none)."""
    try:
        return repr(value)[:40]
    except ValueError:
        return f"{type(value).__name__} too large to print"


def finite_view(view: dict) -> bool:
    """No NaN or inf anywhere in a view (JSON would carry them as text the browser cannot draw)."""

    def numbers(value):
        if isinstance(value, dict):
            for item in value.values():
                yield from numbers(item)
        elif isinstance(value, list | tuple):
            for item in value:
                yield from numbers(item)
        elif isinstance(value, float):
            yield value

    return all(math.isfinite(number) for number in numbers(view))


# snap and moved_points


@pytest.mark.parametrize(
    ("value", "step", "name"),
    [
        (math.nan, 0.1, "value"),
        (math.inf, 0.1, "value"),
        (HUGE, 0.1, "value"),
        (None, 0.1, "value"),
        ("1", 0.1, "value"),
        (True, 0.1, "value"),
        (torch.tensor(1.0), 0.1, "value"),
        (1.0, 0, "step"),
        (1.0, -0.1, "step"),
        (1.0, math.nan, "step"),
        (1.0, math.inf, "step"),
        (1.0, None, "step"),
    ],
    ids=short,
)
def test_snap_refuses_what_is_not_a_finite_number_by_name(value, step, name):
    with pytest.raises(ValueError, match=f"{name} must be"):
        snap(value, step)


@pytest.mark.parametrize("value", [-0.0, -0.001, -0.00049, np.float64(-0.0)])
def test_snap_never_gives_minus_zero(value):
    snapped = snap(value, 0.1)
    assert snapped == 0.0 and math.copysign(1.0, snapped) == 1.0


def test_snap_takes_numpy_numbers_and_tiny_steps():
    assert snap(np.float64(1.0), 1e-320) == 1.0  # numpy's round gave NaN
    assert snap(np.float32(0.25), 0.1) == 0.25
    assert snap(np.int64(2), 0.1) == 2.0


@pytest.mark.parametrize("request_", [None, [], "points", 1])
def test_moved_points_refuses_a_request_that_is_not_a_dict(request_):
    with pytest.raises(ValueError, match="expected \\{'points'"):
        moved_points(request_, {"q": (0.0, 0.0)}, PLANE)


@pytest.mark.parametrize(
    "position",
    [[HUGE, 0], [0, -HUGE], [HUGER, 0], [math.nan, 0], DEEP, [np.array([1.0]), 0], [1 + 2j, 0]],
    ids=["huge", "-huge", "huger", "nan", "deep", "array", "complex"],
)
def test_moved_points_says_what_came_instead_of_two_finite_numbers(position):
    with pytest.raises(ValueError, match="point q must be two finite numbers \\[x, y\\], got"):
        moved_points({"points": {"q": position}}, {"q": (0.0, 0.0)}, PLANE)


@pytest.mark.parametrize("missing", ["x", "y", "step"])
def test_moved_points_names_the_key_its_plane_lacks(missing):
    """A plane without step raised KeyError: 'step' (a hostile pass)."""
    plane = {key: value for key, value in PLANE.items() if key != missing}
    with pytest.raises(ValueError, match=f"the plane must hold 'x', 'y' and 'step'.*'{missing}'"):
        moved_points({"points": {"q": [1, 1]}}, {"q": (0.0, 0.0)}, plane)


def test_moved_points_takes_numpy_numbers():
    moved = moved_points(
        {"points": {"q": [np.float32(9.0), np.int64(-1)]}}, {"q": (0.0, 0.0)}, PLANE
    )
    assert moved == {"q": (3.0, -1.0)}


@pytest.mark.parametrize("view", [None, {}, [], "view", {"problem": "x"}, {"plane": None}])
def test_plane_figure_refuses_what_is_not_a_view(view):
    with pytest.raises(ValueError, match="view must be a plane explorer's view"):
        plane_figure(view)


def _plane_view() -> dict:
    return QueryKeyPlaneExplorer().live.view


@pytest.mark.parametrize(
    ("change", "lacks"),
    [
        (lambda view: {"plane": {}}, "its 'plane' is {}"),
        (lambda view: {**view, "plane": {**view["plane"], "x": "ab"}}, "its 'plane' is"),
        (lambda view: {**view, "title": 5}, "its 'title' is 5"),
        (lambda view: {**view, "points": [{"x": 0, "y": 0, "colour": "red"}]}, "its 'points'"),
        (lambda view: {**view, "lines": [{"colour": "red"}]}, "its 'lines'"),
        (lambda view: {**view, "markers": [{"x": 0, "radius": 3, "colour": "red"}]}, "'markers'"),
        (lambda view: {**view, "bars": {**view["bars"], "series": None}}, "its 'bars'"),
        (lambda view: {**view, "bars": {**view["bars"], "series": []}}, "its 'bars'"),
    ],
    ids=["empty plane", "text range", "number title", "point without label", "line without xy",
         "marker without y", "bars without series", "bars of no series"],
)  # fmt: skip
def test_plane_figure_names_what_a_view_must_hold(change, lacks):
    """Each was a KeyError, AttributeError or ZeroDivisionError from inside the drawing, or (a
    range of text) a meaningless figure."""
    with pytest.raises(
        ValueError, match="view must be a plane explorer's view: a dict holding"
    ) as e:
        plane_figure(change(_plane_view()))
    assert lacks in str(e.value)


def test_plane_figure_draws_the_explorers_views_and_a_problem():
    for explorer in (QueryKeyPlaneExplorer(), DragPoolingExplorer()):
        plane_figure(explorer.live.view)
        plane_figure({**explorer.live.view, "problem": "a problem", "title": None})


def _small_view(**parts) -> dict:
    plane = {"x": [-1, 1], "y": [-1, 1], "xticks": [0], "yticks": [0], "xlabel": "x", "ylabel": "y"}
    return {"plane": plane, **parts}


def test_plane_figure_takes_numpys_floats_without_a_warning():
    """np.float32(0.5) compared with the largest float overflowed in numpy's cast: a
    RuntimeWarning."""
    point = {"x": np.float32(0.5), "y": np.float16(0.5), "label": "a", "colour": "red"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        view = _small_view(points=[point])
        plane_figure({**view, "plane": {**view["plane"], "xticks": [np.float32(0.0)]}})


def _view_with_text(text: str) -> dict:
    """A view with `text` in every place plane_figure draws text."""
    view = _small_view(
        title=text,
        points=[{"x": 0, "y": 0, "label": text, "colour": "red"}],
        lines=[{"xy": [[-1, -1], [1, 1]], "colour": "blue", "label": text}],
        bars={
            "labels": [text],
            "series": [{"name": text, "values": [0.5], "colour": "green"}],
            "ymax": 1.0,
            "title": text,
        },
    )
    view["plane"] = {**view["plane"], "xlabel": text, "ylabel": text}
    return view


@pytest.mark.parametrize("problem", [None, "$x^2$"])
def test_plane_figure_draws_a_dollar_as_text_never_as_a_formula(problem):
    """A title of 'price $\\frac{1}$' raised matplotlib's ParseSyntaxException when drawn, and
    '$x^2$' was drawn as a formula, everywhere a view holds text."""
    broken = plane_figure({**_view_with_text("price $\\frac{1}$"), "problem": problem})
    broken.savefig(io.BytesIO())
    figure = plane_figure({**_view_with_text("$x^2$"), "problem": problem})
    figure.savefig(io.BytesIO())
    dollars = [text for text in figure.findobj(Text) if "$" in text.get_text()]
    assert len(dollars) >= 9  # title, axis labels, point, legends (2), bar label, bars' title
    assert not any(text.get_parse_math() for text in dollars)


COLOURED = {
    "points": {"x": 0, "y": 0, "label": "p", "colour": "red"},
    "lines": {"xy": [[-1, -1], [1, 1]], "colour": "blue"},
    "arrows": {"from": [-1, -1], "to": [1, 1], "colour": "red", "width": 1},
    "markers": {"x": 0, "y": 0, "radius": 5, "colour": "red", "edge": "black"},
}


@pytest.mark.parametrize(
    ("key", "colour"),
    [("points", "colour"), ("lines", "colour"), ("arrows", "colour"), ("markers", "colour"),
     ("markers", "edge")],
)  # fmt: skip
def test_plane_figure_names_a_colour_matplotlib_does_not_know(key, colour):
    """Each was matplotlib's 'Invalid RGBA argument' when the figure was drawn."""
    view = _small_view(**{key: [{**COLOURED[key], colour: "zzz"}]})
    with pytest.raises(ValueError, match=f"its '{key}' item 0 has '{colour}' 'zzz'"):
        plane_figure(view)


def test_plane_figure_refuses_a_bar_series_of_a_colour_matplotlib_does_not_know():
    bars = {"labels": ["a"], "series": [{"name": "s", "values": [0.5], "colour": "zzz"}]}
    with pytest.raises(ValueError, match="its 'bars' are .*'zzz'"):
        plane_figure(_small_view(bars={**bars, "ymax": 1.0, "title": "t"}))


def test_plane_figure_draws_the_themes_foreground_colour_everywhere():
    foreground = COLOURS["foreground"]
    view = _small_view(
        **{key: [{**item, "colour": foreground}] for key, item in COLOURED.items()},
        bars={
            "labels": ["a"],
            "series": [{"name": "s", "values": [0.5], "colour": foreground}],
            "ymax": 1.0,
            "title": "t",
        },
    )
    view["markers"][0]["edge"] = foreground
    plane_figure(view).savefig(io.BytesIO())


@pytest.mark.parametrize("radius", [1e200, MAX_RADIUS * 2, 0, -1])
@pytest.mark.parametrize("key", ["points", "markers"])
def test_plane_figure_refuses_a_radius_out_of_bounds_by_name(key, radius):
    """A radius of 1e200 was an OverflowError when the figure was drawn."""
    view = _small_view(**{key: [{**COLOURED[key], "radius": radius}]})
    with pytest.raises(ValueError, match=f"its '{key}' item 0 has 'radius'"):
        plane_figure(view)


def test_plane_figure_draws_a_radius_at_its_bound():
    view = _small_view(markers=[{**COLOURED["markers"], "radius": MAX_RADIUS}])
    plane_figure(view).savefig(io.BytesIO())


@pytest.mark.parametrize("axis", ["xticks", "yticks"])
def test_plane_figure_refuses_more_ticks_than_it_can_draw(axis):
    """20,000 ticks took minutes to draw."""
    view = _small_view()
    view["plane"] = {**view["plane"], axis: list(np.linspace(-1, 1, 20_000).tolist())}
    with pytest.raises(ValueError, match=f"lists of at most {MAX_TICKS} finite numbers"):
        plane_figure(view)
    view["plane"][axis] = view["plane"][axis][:MAX_TICKS]
    plane_figure(view)


def test_plane_figure_refuses_more_bars_than_it_can_label():
    labels = [str(i) for i in range(MAX_TICKS + 1)]
    series = [{"name": "s", "values": [0.5] * len(labels), "colour": "red"}]
    bars = {"labels": labels, "series": series, "ymax": 1.0, "title": "t"}
    with pytest.raises(ValueError, match="its 'bars' are"):
        plane_figure(_small_view(bars=bars))


@pytest.mark.parametrize("key", ["lines", "arrows"])
def test_plane_figure_refuses_a_negative_width(key):
    """A width of -2 was drawn without a word."""
    view = _small_view(**{key: [{**COLOURED[key], "width": -2}]})
    with pytest.raises(ValueError, match=f"its '{key}' item 0 has 'width' -2"):
        plane_figure(view)
    view[key][0]["width"] = 0
    plane_figure(view)


@pytest.mark.parametrize("width", [1e15, 1e300, MAX_WIDTH * 2])
@pytest.mark.parametrize("key", ["lines", "arrows"])
def test_plane_figure_refuses_a_width_wider_than_any_line_by_name(key, width):
    """An arrow 1e15 wide took a minute to draw, 1e300 longer."""
    view = _small_view(**{key: [{**COLOURED[key], "width": width}]})
    with pytest.raises(
        ValueError, match=re.escape(f"its '{key}' item 0 has 'width' {width}")
    ) as refused:
        plane_figure(view)
    assert f"every width in 0..{MAX_WIDTH}" in str(refused.value)
    view[key][0]["width"] = MAX_WIDTH
    plane_figure(view).savefig(io.BytesIO())


@pytest.mark.parametrize("key", ["title", "problem"])
@pytest.mark.parametrize("text", ["word " * 20_000, "w" * 3000])
def test_plane_figure_cuts_a_very_long_title_or_problem_to_a_few_lines(key, text):
    """100,000 characters took 10 s to draw, and 2,000 words covered the plane (constrained
    layout collapsed)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied"
        figure = plane_figure(_small_view(**{key: text}))
        figure.savefig(io.BytesIO())
    shown = figure.get_suptitle()
    assert shown.endswith("…") and shown.count("\n") < TITLE_LINES


@pytest.mark.parametrize("key", list(COLOURED))
def test_plane_figure_refuses_more_items_than_it_can_draw_by_name(key):
    """2,000 points took 9 s to draw, 1,000 lines 2.5 s."""
    view = _small_view(**{key: [COLOURED[key]] * (MAX_ITEMS + 1)})
    with pytest.raises(ValueError, match=f"its '{key}' are {MAX_ITEMS + 1} items, more than"):
        plane_figure(view)
    view[key] = view[key][:MAX_ITEMS]
    plane_figure(view)


@pytest.mark.parametrize(
    ("bounds", "words"),
    [([-1e308, 1e308], "high - low must be a finite number"),
     ([0, 1e-300], "it would draw [-0.05, 0.05]"),
     ([1e15, 1e15 + 1], "a range matplotlib widens before it draws it")],
    ids=["overflowing width", "too close to 0", "too narrow for its size"],
)  # fmt: skip
@pytest.mark.parametrize("axis", ["x", "y"])
def test_plane_figure_refuses_bounds_matplotlib_cannot_show_by_name(axis, bounds, words):
    """Each was drawn with other bounds than the view's, without a word."""
    view = _small_view()
    view["plane"] = {**view["plane"], axis: bounds, f"{axis}ticks": []}
    with pytest.raises(ValueError, match=re.escape(f"its 'plane' '{axis}' is ")) as refused:
        plane_figure(view)
    assert words in str(refused.value)


@pytest.mark.parametrize("axis", ["x", "y"])
def test_plane_figure_refuses_ticks_outside_the_plane_by_name(axis):
    """A tick at -100 widened the plane to -100..100, without a word."""
    view = _small_view()
    view["plane"] = {**view["plane"], f"{axis}ticks": [-100, 0, 100]}
    with pytest.raises(
        ValueError, match=re.escape(f"its 'plane' '{axis}ticks' has [-100, 100] outside its")
    ):
        plane_figure(view)
    view["plane"][f"{axis}ticks"] = view["plane"][axis]  # ticks on the bounds stay
    axes = plane_figure(view).axes[0]
    assert list(axes.get_xlim() if axis == "x" else axes.get_ylim()) == view["plane"][axis]


# The plane widgets' requests


@pytest.fixture(params=["plane", "pooling"])
def plane_explorer(request):
    return QueryKeyPlaneExplorer() if request.param == "plane" else DragPoolingExplorer()


@pytest.mark.parametrize(
    "position",
    [[HUGE, 1], [1, HUGER], [math.nan, 1], NESTED, [np.array([1.0, 2.0]), 1], {"x": 1}, "ab"],
    ids=["huge", "huger", "nan", "nested", "array", "dict", "str"],
)
def test_a_hostile_point_is_a_problem_in_the_view_and_the_points_stay(plane_explorer, position):
    before, view = dict(plane_explorer.points), plane_explorer.live.view
    plane_explorer.live.request = {"seq": 7, "points": {"q": position}}
    problem = plane_explorer.live.view["problem"]
    assert problem.startswith("that move could not be taken: point q must be two finite")
    assert "got" in problem
    assert plane_explorer.points == before
    assert plane_explorer.live.view["points"] == view["points"]


def test_numpy_numbers_from_python_move_a_point(plane_explorer):
    plane_explorer.move("q", np.float32(1.0), np.float64(1.0))
    assert "problem" not in plane_explorer.live.view
    assert plane_explorer.points["q"][0] == 1.0


def test_a_point_dragged_to_minus_zero_reads_zero():
    explorer = QueryKeyPlaneExplorer()
    explorer.move("q", -0.001, -0.0)
    assert explorer.live.view["table"]["rows"][0][1:3] == ["0.00", "0.00"]
    assert all(math.copysign(1.0, v) == 1.0 for v in explorer.points["q"])


def test_a_move_the_helpers_cannot_compute_is_not_taken():
    explorer = DragPoolingExplorer(data=make_data(n_train=2), width=0.1)  # x 2.48 and 3.84
    explorer.move("t0", 0.0, 1.0)
    assert "problem" not in explorer.live.view
    before, seq = dict(explorer.points), explorer._seq
    explorer.move("t1", 0.0, 1.0)  # no key left within reach of x = 5: every weight there is 0
    assert "no key lies within width σ = 0.100 of x = " in explorer.live.view["problem"]
    assert explorer.points == before and explorer.live.view["seq"] == seq + 1
    shown = {point["name"]: (point["x"], point["y"]) for point in explorer.live.view["points"]}
    assert shown == explorer.points  # the state is what the view shows
    assert finite_view(explorer.live.view)


# The plane widgets' constructors


@pytest.mark.parametrize(
    "temperature", [None, "1", math.nan, math.inf, 0, -1, 0.05, 11, 100, HUGE, [1.0]], ids=short
)
def test_the_plane_refuses_a_temperature_its_slider_cannot_hold(temperature):
    with pytest.raises(ValueError, match="temperature must"):
        QueryKeyPlaneExplorer(temperature=temperature)


@pytest.mark.parametrize("width", [None, "0.3", math.nan, math.inf, 0, 0.01, 6, HUGE], ids=short)
def test_the_pooling_widget_refuses_a_width_its_slider_cannot_hold(width):
    with pytest.raises(ValueError, match="width must"):
        DragPoolingExplorer(width=width)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"query": (HUGE, 0)}, "the query must be two finite numbers"),
        ({"query": (math.nan, 0)}, "the query must be two finite numbers"),
        ({"keys": [(0, 0), (1, 1), (2, 2), (HUGER, 0)]}, "key k3 must be two finite numbers"),
    ],
    ids=short,
)
def test_the_plane_refuses_points_no_float_holds_by_name(arguments, words):
    with pytest.raises(ValueError, match=words):
        QueryKeyPlaneExplorer(**arguments)


def test_the_widgets_take_numpy_numbers_as_arguments():
    assert QueryKeyPlaneExplorer(query=(np.float32(1.0), 0), temperature=np.float64(2.0))
    assert DragPoolingExplorer(query=np.float32(2.0), width=np.float64(0.5))


@pytest.mark.parametrize("query", [HUGE, HUGER, np.float64(math.nan)], ids=["huge", "huger", "nan"])
def test_the_pooling_widget_refuses_a_query_no_float_holds(query):
    with pytest.raises(ValueError, match="query must be a number in 0.0..5.0"):
        DragPoolingExplorer(query=query)


def damaged(**changes) -> RegressionData:
    data = make_data()
    fields = {name: getattr(data, name) for name in ("x_train", "y_train", "x_test", "y_test")}
    return RegressionData(**{**fields, **changes})


DATA = make_data()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (damaged(x_test=DATA.x_test * math.nan), "data.x_test must hold finite real numbers"),
        (damaged(y_test=DATA.y_test * math.inf), "data.y_test must hold finite real numbers"),
        (damaged(y_train=DATA.y_train * math.nan), "data.y_train must hold finite real numbers"),
        (damaged(x_train=DATA.x_train.tolist()), "data.x_train must be a torch.Tensor"),
        (damaged(x_train=DATA.x_train.numpy()), "torch.from_numpy\\(data.x_train\\)"),
        (damaged(x_train=DATA.x_train[:3]), "data.x_train \\(3,\\) and data.y_train \\(50,\\)"),
        (damaged(y_test=DATA.y_test[:3]), "data.x_test \\(51,\\) and data.y_test \\(3,\\)"),
        (damaged(x_train=DATA.x_train[:, None]), "data.x_train must be one row"),
        (damaged(x_train=DATA.x_train[:0], y_train=DATA.y_train[:0]), "n >= 1, got \\(0,\\)"),
        (damaged(x_test=DATA.x_test[:0], y_test=DATA.y_test[:0]), "data.x_test must be one row"),
        (damaged(x_train=torch.tensor(1.0)), "data.x_train must be one row"),
        (damaged(x_train=DATA.x_train.to(torch.complex64)), "finite real numbers"),
        (damaged(x_test=DATA.x_test * 100), "data.x_test must lie in the plane"),
        (make_data(n_train=500), "data.x_train must hold at most 499 points, one to drag each"),
    ],
    ids=short,
)
def test_the_pooling_widget_refuses_damaged_data_by_name(data, words):
    with pytest.raises(ValueError, match=words):
        DragPoolingExplorer(data=data)


def test_a_first_view_the_helpers_cannot_compute_is_refused_by_the_constructor():
    with pytest.raises(ValueError, match="no key lies within width"):
        DragPoolingExplorer(data=make_data(n_train=2), width=10**-1.5)


@pytest.mark.parametrize("n_train", [2, 3, 200])
def test_odd_sized_data_shows_finite_numbers_at_every_width_it_takes(n_train):
    explorer = DragPoolingExplorer(data=make_data(n_train=n_train, n_test=7), width=1.0)
    for width in (10**0.7, 1.0, 0.3, 0.1, 10**-1.5):
        explorer.controls["width"].value = width
        assert finite_view(explorer.live.view)
        shown = {point["name"]: (point["x"], point["y"]) for point in explorer.live.view["points"]}
        assert {n: p for n, p in shown.items() if n != "q"} == {
            n: p for n, p in explorer.points.items() if n != "q"
        }


# The scoring helpers


LAYER = fixed_additive_attention()
QUERY = torch.tensor([1.0, 0.5], dtype=torch.float64)
KEYS = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0], [2.0, 2.0]], dtype=torch.float64)


def nan_layer():
    layer = fixed_additive_attention()
    with torch.no_grad():
        layer.W_q.weight[0, 0] = math.nan
    return layer


@pytest.mark.parametrize(
    ("query", "keys", "layer", "temperature", "words"),
    [
        (QUERY * math.nan, KEYS, LAYER, 1.0, "query or the keys hold NaN or inf"),
        (QUERY, KEYS * math.inf, LAYER, 1.0, "query or the keys hold NaN or inf"),
        (QUERY * 1e200, KEYS * 1e200, LAYER, 1.0, "scores overflow"),
        (QUERY, KEYS, LAYER, 1e-320, "scores overflow"),
        (QUERY, KEYS, nan_layer(), 1.0, "additive layer's weights hold NaN"),
    ],
    ids=["nan query", "inf keys", "huge", "tiny temperature", "nan weights"],
)
def test_scores_by_function_never_returns_nan_quietly(query, keys, layer, temperature, words):
    with pytest.raises(ValueError, match=f"scores are not finite: the {words}"):
        scores_by_function(query, keys, layer, temperature)


@pytest.mark.parametrize("layer", [None, "additive", torch.nn.Linear(2, 1)], ids=short)
def test_scores_by_function_names_an_additive_that_is_not_the_layer(layer):
    with pytest.raises(TypeError, match="additive must be an AdditiveAttention"):
        scores_by_function(QUERY, KEYS, layer)


@pytest.mark.parametrize(
    "arguments", [{"size": 2**40}, {"num_hiddens": 2**40}, {"size": 4096, "num_hiddens": 4096}]
)
def test_fixed_additive_attention_refuses_a_layer_too_large_to_build(arguments):
    with pytest.raises(ValueError, match="weights, more than 2\\^24"):
        fixed_additive_attention(**arguments)


# The drawing helpers


@pytest.mark.parametrize(
    ("size", "error", "words"),
    [
        (None, ValueError, "size must be a whole number"),
        ("96", ValueError, "size must be a whole number"),
        (0, ValueError, "size must be a whole number >= 1"),
        (-5, ValueError, "size must be a whole number >= 1"),
        (96.0, ValueError, "size must be a whole number"),
        (HUGE, ValueError, "more than 2\\^28"),
        (HUGER, ValueError, "more than 2\\^28"),
    ],
    ids=short,
)
def test_check_strokes_names_a_bad_grid_size(size, error, words):
    with pytest.raises(error, match=words):
        check_strokes([[[1, 2]]], size)


@pytest.mark.parametrize(
    ("strokes", "error", "words"),
    [
        ([DEEP], TypeError, "each point must be \\[x, y\\], two numbers; stroke 0 holds"),
        ([[[HUGER, 1]]], ValueError, "two finite numbers; stroke 0 holds a list too large"),
    ],
    ids=["deep", "huger"],
)
def test_check_strokes_shows_any_point_briefly(strokes, error, words):
    with pytest.raises(error, match=words):
        check_strokes(strokes, 96)


@pytest.mark.parametrize("pen_radius", [200.0, 1e6, 1e308])
def test_a_pen_wider_than_the_grid_inks_it_all(pen_radius):
    assert rasterise_strokes([[[1, 2], [50, 60]]], 96, pen_radius).all()


@pytest.mark.parametrize(("size", "pen_radius"), [(4096, 2000.0), (2000, 500.0)])
def test_a_pen_reaching_too_many_cells_is_refused_with_the_largest_pen_allowed(size, pen_radius):
    """A single dot with pen_radius 500 was told to draw fewer or shorter strokes."""
    with pytest.raises(ValueError, match="too large for any stroke") as refused:
        rasterise_strokes([[[5, 5]]], size, pen_radius)
    widest = float(
        re.search(
            r"a smaller pen was meant, pen_radius at most ([\d.]+)$", str(refused.value)
        ).group(1)
    )
    assert rasterise_strokes([[[5, 5]]], size, widest).any()
    with pytest.raises(ValueError, match="too large for any stroke"):
        rasterise_strokes([[[5, 5]]], size, widest + 0.5)


# The drawing pad's requests


@pytest.fixture(scope="module")
def models() -> dict:
    return load_vision_models()


@pytest.mark.parametrize(
    ("strokes", "words"),
    [
        ([NESTED], "each point must be [x, y], two numbers; stroke 0 holds [[[[[[[...]]]]]]]"),
        ([[[HUGER, 1]]], "two finite numbers; stroke 0 holds a list too large to print"),
    ],
    ids=["nested", "huger"],
)
def test_a_hostile_drawing_is_a_problem_in_the_view_and_the_drawing_stays(models, strokes, words):
    explorer = DrawingExplorer(strokes=[[[10, 10], [20, 20]]], models=models)
    before = explorer.strokes
    explorer.live.request = {"seq": 3, "strokes": strokes}  # as the browser sends it
    assert words in explorer.live.view["problem"]
    assert explorer.strokes is before
