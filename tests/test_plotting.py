import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from helpers.plotting import show_heatmaps


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_single_map_with_token_labels_and_values():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    fig = show_heatmaps(
        weights, x_labels=list("abcd"), y_labels=list("xyz"), titles="t", annot=True
    )
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcd")
    assert [t.get_text() for t in ax.get_yticklabels()] == list("xyz")
    assert ax.get_xlabel() == "keys" and ax.get_ylabel() == "queries" and ax.get_title() == "t"
    cell_values = [t.get_text() for t in ax.texts]
    assert cell_values[0] == f"{weights[0, 0].item():.2f}" and len(cell_values) == 12
    assert len(fig.axes) == 2  # the map and its colour bar


def test_grid_shares_one_colour_scale():
    maps = np.random.default_rng(0).random((2, 3, 4, 5))
    fig = show_heatmaps(maps, titles=[[f"{r}{c}" for c in range(3)] for r in range(2)])
    meshes = [ax.collections[0] for ax in fig.axes[:6]]
    assert {mesh.get_clim() for mesh in meshes} == {(0.0, maps.max())}
    assert len(fig.axes) == 7
    assert fig.axes[4].get_title() == "11"


def test_separate_scales_give_each_map_its_own_colour_bar():
    maps = np.stack([np.eye(3), np.full((3, 3), 0.1)])
    fig = show_heatmaps(maps, shared_scale=False)
    assert [ax.collections[0].get_clim() for ax in fig.axes if ax.get_label() != "<colorbar>"] == [
        (0.0, 1.0),
        (0.0, 0.1),
    ]
    assert len(fig.axes) == 4  # two maps, two colour bars


def test_row_of_maps_takes_a_flat_list_of_titles():
    fig = show_heatmaps(np.ones((2, 3, 3)) / 3, titles=["a", "b"])
    assert [ax.get_title() for ax in fig.axes[:2]] == ["a", "b"]


def test_bad_shapes_and_labels_are_explained():
    with pytest.raises(ValueError, match="got shape"):
        show_heatmaps(np.ones(4))
    with pytest.raises(ValueError, match="x_labels has 2 labels for 4"):
        show_heatmaps(np.ones((3, 4)), x_labels=["a", "b"])
    with pytest.raises(ValueError, match="titles must match"):
        show_heatmaps(np.ones((2, 3, 4)), titles=["only one"])


def test_show_heatmaps_labels_each_map_with_its_own_tokens():
    tokens = [["a", "b"], ["c", "d"], ["e", "f"]]
    fig = show_heatmaps(torch.rand(3, 2, 2), x_labels=tokens, y_labels=tokens, cbar_label=None)
    for ax, labels in zip(fig.axes, tokens, strict=True):
        assert [t.get_text() for t in ax.get_xticklabels()] == labels
        assert [t.get_text() for t in ax.get_yticklabels()] == labels
    assert len(fig.axes) == 3  # no colour bar
    plt.close(fig)
    with pytest.raises(ValueError, match="one such list per map"):
        show_heatmaps(torch.rand(3, 2, 2), x_labels=tokens[:2])
