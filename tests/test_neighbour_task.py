import pytest
import torch

from helpers.neighbour_task import (
    NeighbourModel,
    make_neighbour_batch,
    neighbour_accuracy,
    train_neighbour_model,
    weight_by_offset,
)


def test_batch_neighbours_wrap_around():
    tokens, left, right = make_neighbour_batch(
        2, length=4, generator=torch.Generator().manual_seed(0)
    )
    assert left[:, 0].tolist() == tokens[:, -1].tolist()
    assert right[:, -1].tolist() == tokens[:, 0].tolist()
    assert left[:, 2].tolist() == tokens[:, 1].tolist()


def test_weight_by_offset_reads_the_diagonals():
    eye = torch.eye(5)[None, None]  # (1, 1, 5, 5): every query on itself
    shifted = eye.roll(1, dims=-1)  # query i on key i + 1
    weights = torch.cat([eye, shifted], dim=1)  # (1, 2 heads, 5, 5)
    torch.testing.assert_close(weight_by_offset(weights), torch.tensor([[0.0, 1, 0], [0, 0, 1]]))


def test_trained_heads_split_the_two_relations():
    model, losses = train_neighbour_model()
    batch = make_neighbour_batch(500, generator=torch.Generator().manual_seed(1))
    assert neighbour_accuracy(model, *batch) == 1.0
    offsets = weight_by_offset(model.attention.attention_weights)  # (2 heads, 3)
    looks_left, looks_right = offsets[:, 0].argmax(), offsets[:, 2].argmax()
    assert looks_left != looks_right
    assert offsets[looks_left, 0] > 0.9 and offsets[looks_right, 2] > 0.9
    assert losses[-1] < 0.01


def test_model_refuses_wrong_length():
    with pytest.raises(ValueError, match=r"tokens must be \(B, 8\)"):
        NeighbourModel()(torch.zeros(2, 5, dtype=torch.long))


def test_training_leaves_the_thread_count_as_it_was():
    before = torch.get_num_threads()
    train_neighbour_model(steps=2)
    assert torch.get_num_threads() == before
