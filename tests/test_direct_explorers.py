"""The widgets you drag (chapters 01 and 03), driven from Python as the browser drives them:
positions in through the `request` trait, and the numbers out equal the helpers' for those
positions. The front end itself is tested in test_direct_widgets_in_browser.py."""

import math
import re

import pytest
import torch

from helpers.attention import masked_softmax
from helpers.kernel_regression import gaussian_kernel, kernel_pooling, make_data
from helpers.scoring import SCORE_FUNCTIONS, dot_scores, fixed_additive_attention
from helpers.widgets import DragPoolingExplorer, QueryKeyPlaneExplorer
from helpers.widgets.direct import FRONT_END, PlaneWidget, moved_points, snap

PLANE = {"x": [-3.0, 3.0], "y": [-3.0, 3.0], "step": 0.1}


def reference_weights(query, keys, temperature):
    """The three scoring functions' softmax weights, from torch and the layer, not the widget."""
    q = torch.tensor(query, dtype=torch.float64)
    k = torch.tensor(keys, dtype=torch.float64)
    layer = fixed_additive_attention(2, 8, 0)
    features = torch.tanh(layer.W_q(q)[None] + layer.W_k(k))  # (k, 8)
    scores = {
        "dot product": k @ q / temperature,
        "scaled dot product": k @ q / math.sqrt(2) / temperature,
        "additive": layer.w_v(features)[:, 0] / temperature,
    }
    return {name: torch.softmax(s, dim=0) for name, s in scores.items()}


def test_the_plane_explorer_leaves_the_global_random_numbers_alone():
    """Building the additive layer drew nn.Linear's first weights from the global generator
    (a hostile pass); its weights are still the seeded generator's alone."""
    torch.manual_seed(0)
    expected = torch.rand(1)
    torch.manual_seed(0)
    QueryKeyPlaneExplorer()
    assert torch.equal(torch.rand(1), expected)
    generator = torch.Generator().manual_seed(0)
    for parameter in fixed_additive_attention(2, 8, 0).parameters():
        drawn = torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
        assert torch.equal(parameter, drawn.double())


def keys_of(explorer):
    return [explorer.points[name] for name in explorer.points if name != "q"]


# The shared parts


def test_snap_keeps_a_tenth_of_the_step():
    assert snap(0.123456, 0.1) == 0.12
    assert snap(-2.987, 0.1) == -2.99
    assert snap(1.23456, 0.01) == 1.235


def test_moved_points_clamps_snaps_and_keeps_the_unmoved_exactly():
    current = {"q": (0.1234567, 0.5), "k0": (1.0, 1.0)}
    moved = moved_points({"points": {"q": [0.1234567, 0.5], "k0": [9.0, -0.56789]}}, current, PLANE)
    assert moved == {"q": (0.1234567, 0.5), "k0": (3.0, -0.57)}
    assert current["k0"] == (1.0, 1.0)  # the explorer's state is not changed in place


@pytest.mark.parametrize(
    "request_",
    [
        {},
        {"points": [1, 2]},
        {"points": {"nobody": [0, 0]}},
        {"points": {"q": [0]}},
        {"points": {"q": [0, 1, 2]}},
        {"points": {"q": ["0", 1]}},
        {"points": {"q": [True, 1]}},
        {"points": {"q": [float("nan"), 1]}},
        {"points": {"q": [float("inf"), 1]}},
        {"points": {"q": None}},
    ],
)
def test_moved_points_refuses_what_is_not_points_by_name(request_):
    with pytest.raises(ValueError, match="point|points"):
        moved_points(request_, {"q": (0.0, 0.0)}, PLANE)


def test_the_front_end_ships_in_the_package_and_fetches_nothing():
    code = PlaneWidget._esm
    assert "function connect(" in code and "export default { render }" in code
    for path in FRONT_END.glob("*.js"):
        text = path.read_text()
        assert not re.search(r"""import\s[^;]*from\s+["']https?:""", text), path.name
        assert not re.search(r"""import\(\s*["']https?:""", text), path.name
        assert "fetch(" not in text, path.name


# Chapter 03: a query and keys in a plane


def test_default_view_holds_the_helpers_weights():
    explorer = QueryKeyPlaneExplorer()
    expected = reference_weights(explorer.points["q"], keys_of(explorer), 1.0)
    for name in SCORE_FUNCTIONS:
        torch.testing.assert_close(explorer.state["weights"][name], expected[name])
        assert explorer.state["weights"][name].sum().item() == pytest.approx(1.0)
    series = {s["name"]: s["values"] for s in explorer.live.view["bars"]["series"]}
    assert series["additive"] == pytest.approx(expected["additive"].tolist())


def test_a_move_gives_the_weights_for_the_new_positions():
    explorer = QueryKeyPlaneExplorer(temperature=0.5)
    explorer.move("k3", 1.234567, 0.9)
    explorer.move("q", -0.5, 2.0)
    assert explorer.points["k3"] == (1.23, 0.9)
    expected = reference_weights((-0.5, 2.0), keys_of(explorer), explorer.values()["temperature"])
    for name in SCORE_FUNCTIONS:
        torch.testing.assert_close(explorer.state["weights"][name], expected[name])
    chosen = expected["scaled dot product"]
    keys = torch.tensor(keys_of(explorer), dtype=torch.float64)
    torch.testing.assert_close(explorer.state["output"], chosen @ keys)
    assert explorer.live.view["seq"] == 2
    row = explorer.live.view["table"]["rows"][4]  # k3
    assert row[:3] == ["k3", "1.23", "0.90"]
    assert row[6] == f"{chosen[3].item():.3f}"


def test_the_scaled_scores_are_torchs_scaled_dot_product_attention():
    explorer = QueryKeyPlaneExplorer()
    query = torch.tensor([explorer.points["q"]], dtype=torch.float64)  # (1, 2)
    keys = torch.tensor(keys_of(explorer), dtype=torch.float64)  # (6, 2)
    output = torch.nn.functional.scaled_dot_product_attention(query, keys, keys)
    explorer.controls["score"].value = "scaled dot product"
    torch.testing.assert_close(explorer.state["output"], output[0])


def test_a_key_aligned_with_the_query_and_farther_out_wins_the_dot_product():
    explorer = QueryKeyPlaneExplorer(query=(1.0, 1.0))
    explorer.move("k0", 2.5, 2.5)
    weights = explorer.state["weights"]
    assert weights["dot product"].argmax().item() == 0
    # scaling flattens the same ranking; the additive score saturates (tanh) and ranks its own way
    assert weights["scaled dot product"].max() < weights["dot product"].max()
    assert weights["scaled dot product"].argmax().item() == 0


def test_temperature_and_score_controls_redraw_without_a_request():
    explorer = QueryKeyPlaneExplorer()
    sharp = explorer.state["weights"]["dot product"].max().item()
    explorer.controls["temperature"].value = 10.0
    assert explorer.state["weights"]["dot product"].max().item() < sharp
    assert explorer.live.view["seq"] == 0
    explorer.controls["score"].value = "additive"
    assert explorer.live.view["title"].startswith("additive, T = 10.00")


def test_a_score_set_to_none_asks_for_a_choice_and_recovers():
    """The score set to None from code raised KeyError(None), and so did every later move."""
    explorer = QueryKeyPlaneExplorer()
    explorer.controls["score"].value = None
    assert explorer.live.view["problem"] == "choose a value for score"
    explorer.move("q", 0.5, 0.5)
    assert explorer.live.view["problem"] == "choose a value for score"
    explorer.controls["score"].value = "additive"
    assert explorer.live.view.get("problem") is None
    explorer.move("q", 0.5, 0.5)
    assert explorer.points["q"] == (0.5, 0.5)
    assert explorer.live.view.get("problem") is None


@pytest.mark.parametrize(
    "make, name, ends",
    [
        (QueryKeyPlaneExplorer, "temperature", "0.1 to 10"),
        (DragPoolingExplorer, "width", "0.0316 to 5.01"),
    ],
    ids=["temperature", "width"],
)
@pytest.mark.parametrize("wrong", [1e9, 0, -1, 1e-300, math.inf, math.nan], ids=repr)
def test_a_log_slider_set_from_code_past_its_ends_is_refused_by_name(make, name, ends, wrong):
    """temperature = 1e9 became 10, and 0 became 0.1, drawn with no problem shown."""
    from traitlets import TraitError

    explorer = make()
    view = explorer.live.view
    control = explorer.controls[name]
    with pytest.raises(
        TraitError, match=rf"^{re.escape(control.description)} must be a number from {ends}; got "
    ):
        control.value = wrong
    assert explorer.live.view == view


def test_points_dragged_off_the_plane_are_clamped_to_it():
    explorer = QueryKeyPlaneExplorer()
    explorer.move("k1", 100.0, -1e9)
    assert explorer.points["k1"] == (3.0, -3.0)
    assert explorer.live.view.get("problem") is None


@pytest.mark.parametrize(
    "request_",
    [
        {"seq": 5, "points": {"k9": [0, 0]}},
        {"seq": 5, "points": {"q": [float("nan"), 0]}},
        {"seq": 5, "points": "q"},
        {"seq": "5"},
        {"seq": 5, "points": {"q": [1e400, 0]}},
    ],
)
def test_a_bad_request_is_answered_with_a_problem_and_changes_nothing(request_):
    explorer = QueryKeyPlaneExplorer()
    before = dict(explorer.points)
    explorer.live.request = request_
    assert explorer.points == before
    if "points" in request_:
        assert "could not be taken" in explorer.live.view["problem"]
    explorer.move("q", 0.5, 0.5)  # the next good move clears the problem
    assert explorer.live.view.get("problem") is None


def test_a_request_with_an_old_number_is_still_answered():
    explorer = QueryKeyPlaneExplorer()
    explorer.live.request = {"seq": 7, "points": {"q": [0.0, 1.0]}}
    explorer.live.request = {"seq": 3, "points": {"q": [0.5, 1.0]}}
    assert explorer.points["q"] == (0.5, 1.0)
    assert explorer.live.view["seq"] == 7  # the newest number the front end has used


@pytest.mark.parametrize(
    "arguments",
    [
        {"keys": [(0, 0)] * 3},
        {"keys": [(0, 0)] * 9},
        {"keys": "abcd"},
        {"query": (0, 5)},
        {"query": (0,)},
        {"query": ("a", 0)},
        {"score": "cosine"},
    ],
)
def test_bad_arguments_are_refused_by_name(arguments):
    with pytest.raises(ValueError, match="keys|query|score"):
        QueryKeyPlaneExplorer(**arguments)


def test_four_and_eight_keys_work():
    for count in (4, 8):
        keys = [(math.cos(i), math.sin(i)) for i in range(count)]
        explorer = QueryKeyPlaneExplorer(keys=keys)
        assert len(explorer.state["weights"]["additive"]) == count


def test_the_static_figure_is_a_png():
    png = QueryKeyPlaneExplorer()._repr_png_()
    assert png.startswith(b"\x89PNG")


# Chapter 01: drag the query and the data


def test_dragging_the_query_gives_kernel_pooling_at_it():
    data = make_data()
    explorer = DragPoolingExplorer(data, width=0.3, query=2.5)
    explorer.move("q", 3.4567)
    assert explorer.points["q"][0] == 3.46
    width = explorer.values()["width"]
    prediction, weights = kernel_pooling(
        torch.tensor([3.46], dtype=torch.float64),
        data.x_train.double(),
        data.y_train.double(),
        gaussian_kernel,
        width,
    )
    torch.testing.assert_close(explorer.state["weights"], weights[0])
    assert explorer.state["prediction"] == pytest.approx(prediction.item())
    assert explorer.points["q"][1] == pytest.approx(prediction.item())  # the query rides the fit


def test_the_query_moves_along_x_only():
    explorer = DragPoolingExplorer()
    explorer.move("q", 1.0, 5.9)
    assert explorer.points["q"][1] == pytest.approx(explorer.state["prediction"])


def test_dragging_a_training_point_changes_the_fit_as_kernel_pooling_says():
    data = make_data()
    explorer = DragPoolingExplorer(data)
    before = explorer.state["fit"].clone()
    explorer.move("t10", 2.0, 5.5)
    keys, values = data.x_train.double().clone(), data.y_train.double().clone()
    keys[10], values[10] = 2.0, 5.5
    fit, _ = kernel_pooling(
        explorer.state["fit_x"], keys, values, gaussian_kernel, explorer.values()["width"]
    )
    torch.testing.assert_close(explorer.state["fit"], fit)
    assert not torch.equal(fit, before)
    unmoved = explorer.points["t11"]
    assert unmoved == (data.x_train[11].item(), data.y_train[11].item())  # exactly as made


def test_the_readout_lists_the_heaviest_points():
    explorer = DragPoolingExplorer()
    rows = explorer.live.view["table"]["rows"]
    weights = explorer.state["weights"]
    heaviest = weights.argsort(descending=True)[:5].tolist()
    assert [row[0] for row in rows[1:]] == [f"t{i}" for i in heaviest]
    assert rows[0][2] == f"{explorer.state['prediction']:.3f}"


def test_a_query_no_key_reaches_is_a_problem_not_an_error():
    explorer = DragPoolingExplorer(width=0.05)
    for index in range(50):  # every training point to the left edge
        explorer.move(f"t{index}", 0.0, 1.0)
    explorer.move("q", 5.0)
    explorer.controls["width"].value = 10**-1.5
    assert "no key lies within width" in explorer.live.view["problem"]


def test_masked_softmax_is_what_the_plane_uses():
    explorer = QueryKeyPlaneExplorer()
    scores = dot_scores(
        torch.tensor([explorer.points["q"]], dtype=torch.float64),
        torch.tensor(keys_of(explorer), dtype=torch.float64),
        scaled=True,
    )
    torch.testing.assert_close(
        explorer.state["weights"]["scaled dot product"], masked_softmax(scores)[0]
    )


@pytest.mark.parametrize("query", [-0.1, 5.1, "2", None, True])
def test_drag_pooling_refuses_a_query_off_the_axis(query):
    with pytest.raises(ValueError, match="query"):
        DragPoolingExplorer(query=query)
