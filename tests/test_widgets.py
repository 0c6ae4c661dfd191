import pytest
import torch

from helpers.kernel_regression import gaussian_kernel, kernel_pooling
from helpers.widgets import KernelRegressionExplorer, MaskedSoftmaxExplorer


def test_kernel_regression_explorer_follows_its_sliders():
    explorer = KernelRegressionExplorer(width=0.5, query=2.5)
    data = explorer.data
    first_image = bytes(explorer.image.value)
    assert first_image.startswith(b"\x89PNG")
    expected, weights = kernel_pooling(
        torch.tensor([2.5]), data.x_train, data.y_train, gaussian_kernel, 0.5
    )
    assert explorer.state["prediction"] == pytest.approx(expected.item())
    torch.testing.assert_close(explorer.state["weights"], weights[0])

    explorer.controls["query"].value = 4.0
    heaviest_key = data.x_train[explorer.state["weights"].argmax()].item()
    assert abs(heaviest_key - 4.0) < 0.3
    assert bytes(explorer.image.value) != first_image

    narrow_fit = explorer.state["fit"]
    explorer.controls["width"].value = 3.0
    assert explorer.state["fit"].std() < narrow_fit.std()  # a wide kernel smooths the fit
    assert explorer.state["weights"].max() < 0.1


def test_masked_softmax_explorer_follows_its_sliders():
    explorer = MaskedSoftmaxExplorer(valid_len=4, query=0)
    assert (explorer.state["weights"][:, 4:] == 0).all()
    first_image = bytes(explorer.image.value)

    explorer.controls["valid_len"].value = 2
    assert (explorer.state["weights"][:, 2:] == 0).all()
    torch.testing.assert_close(explorer.state["weights"].sum(1), torch.ones(4))
    assert bytes(explorer.image.value) != first_image

    explorer.controls["valid_len"].value = 0
    assert (explorer.state["weights"] == 0).all()

    explorer.controls["valid_len"].value = 6
    explorer.controls["query"].value = 3
    torch.testing.assert_close(explorer.state["row"], torch.softmax(explorer.scores[3], dim=0))


def test_explorer_shows_itself_as_a_static_picture_with_a_stable_repr():
    explorer = MaskedSoftmaxExplorer(valid_len=3, query=1)
    assert explorer._repr_png_().startswith(b"\x89PNG")
    assert repr(explorer) == "MaskedSoftmaxExplorer(valid_len=3, query=1)"


def test_weight_axis_grows_to_fit_the_largest_weight():
    explorer = KernelRegressionExplorer(width=0.3)
    top_before = explorer._bottom.get_ylim()[1]
    explorer.controls["width"].value = 0.04  # one key takes most of the weight: taller axis
    assert explorer._bottom.get_ylim()[1] > top_before
    assert explorer.state["weights"].max() <= explorer._bottom.get_ylim()[1]


def test_scaling_explorer_follows_its_controls():
    from helpers.widgets import ScalingExplorer

    explorer = ScalingExplorer(d_k=256, scaled=True)
    scaled = explorer.state["max_weight"]
    explorer.controls["scaled"].value = False
    assert explorer.state["max_weight"] > scaled + 0.4
    assert explorer.state["scores"].std() > 10
    explorer.controls["scaled"].value = True
    explorer.controls["temperature"].value = 10.0
    assert explorer.state["entropy"] > 2.2  # nearly uniform over 10 keys (log 10 = 2.30)
    explorer.controls["d_k"].value = 4
    assert explorer.state["weights"].shape == (6, 8)
    assert repr(explorer) == "ScalingExplorer(d_k=4, scaled=True, temperature=10)"


def test_head_explorer_switches_head_and_example():
    from helpers.neighbour_task import NeighbourModel, make_neighbour_batch
    from helpers.widgets import HeadExplorer

    torch.manual_seed(0)
    model = NeighbourModel()
    tokens, _, _ = make_neighbour_batch(5, generator=torch.Generator().manual_seed(0))
    explorer = HeadExplorer(model, tokens)
    first = explorer.state["weights"]
    explorer.controls["head"].value = 1
    assert not torch.equal(explorer.state["weights"], first)
    torch.testing.assert_close(explorer.state["weights"], model.attention.attention_weights[0, 1])
    explorer.controls["example"].value = 3
    assert explorer.state["tokens"] == tokens[3].tolist()
