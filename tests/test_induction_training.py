"""helpers.induction's training half: the training batches, measure(), the recipe, training,
the saved file, and what the shipped models do."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.checkpoints import CheckpointError, save_checkpoint
from helpers.gpt import GPT, GPTConfig
from helpers.induction import (
    MODEL_LAYERS,
    Recipe,
    induction_score,
    load_models,
    load_training,
    measure,
    previous_token_score,
    repeated_sequences,
    train_and_save,
    train_model,
    training_batch,
)

TINY = Recipe(
    vocab_size=16,
    context_length=16,
    d_model=8,
    batch_size=4,
    steps=6,
    log_every=2,
    snapshot_every=3,
    eval_batch=4,
    eval_length=8,
    longest_block=8,
)


def copied_blocks(ids: torch.Tensor, shortest: int) -> list[int]:
    """Per row, the longest run of positions t with ids[t] == ids[t - d] for one distance d."""
    longest = []
    for row in ids.tolist():
        best = 0
        for distance in range(shortest, len(row)):
            run = 0
            for t in range(distance, len(row)):
                run = run + 1 if row[t] == row[t - distance] else 0
                best = max(best, run)
        longest.append(best)
    return longest


def test_a_training_batch_copies_one_block_of_an_allowed_length_somewhere():
    recipe = Recipe(batch_size=200)
    ids = training_batch(recipe, torch.Generator().manual_seed(0))
    assert ids.shape == (200, recipe.context_length) and ids.dtype == torch.int64
    assert 0 <= ids.min() and ids.max() < recipe.vocab_size
    runs = copied_blocks(ids, recipe.shortest_block)
    assert min(runs) >= recipe.shortest_block
    assert len(set(runs)) > 10  # blocks of many lengths


def test_a_training_batch_depends_only_on_the_generator():
    first = training_batch(TINY, torch.Generator().manual_seed(3))
    second = training_batch(TINY, torch.Generator().manual_seed(3))
    assert torch.equal(first, second)
    assert not torch.equal(first, training_batch(TINY, torch.Generator().manual_seed(4)))


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"shortest_block": 1}, "shortest_block"),
        ({"longest_block": 30}, "longest_block"),
        ({"eval_length": 25}, "eval_length"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"weight_decay": -1}, "weight_decay"),
        ({"steps": 2.5}, "steps"),
        ({"seed": -1}, "seed"),
    ],
)
def test_a_bad_recipe_is_refused_by_name(changes, words):
    with pytest.raises((TypeError, ValueError), match=words):
        Recipe(**changes)


def tiny_model(layers: int = 2) -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(
        vocab_size=16,
        context_length=16,
        d_model=8,
        num_heads=2,
        num_layers=layers,
        d_ff=8,
        attention_only=True,
    )
    model = GPT(config)
    with torch.no_grad():
        model.tokens.weight.normal_()
        model.positions.weight.normal_()
    return model.eval()


def test_measure_equals_the_losses_and_scores_computed_here():
    model = tiny_model()
    ids = repeated_sequences(5, 8, 16, torch.Generator().manual_seed(1))
    found = measure(model, ids, 8)
    exact = GPT(model.config).double().eval()
    exact.load_state_dict(model.state_dict())
    logits = exact(ids)
    losses = [
        [F.cross_entropy(logits[b, t], ids[b, t + 1]).item() for t in range(15)] for b in range(5)
    ]
    first = sum(row[t] for row in losses for t in range(7)) / 35
    second = sum(row[t] for row in losses for t in range(8, 15)) / 35
    assert found["first_copy_loss"] == pytest.approx(first, rel=1e-12)
    assert found["second_copy_loss"] == pytest.approx(second, rel=1e-12)
    right = (logits[:, 8:15].argmax(-1) == ids[:, 9:]).double().mean().item()
    assert found["second_copy_accuracy"] == right
    maps = exact.attention_maps()
    for layer in range(2):
        assert torch.allclose(found["induction"][layer], induction_score(maps[layer], 8).mean(0))
        assert torch.allclose(
            found["previous_token"][layer], previous_token_score(maps[layer]).mean(0)
        )
    assert found["induction"].shape == found["previous_token"].shape == (2, 2)


def test_measure_does_not_depend_on_the_thread_count():
    model = tiny_model()
    ids = repeated_sequences(16, 8, 16, torch.Generator().manual_seed(2))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = measure(model, ids, 8)
        torch.set_num_threads(3)
        three = measure(model, ids, 8)
    finally:
        torch.set_num_threads(threads)
    for key in ("first_copy_loss", "second_copy_loss"):
        assert round(one[key], 6) == round(three[key], 6)


@pytest.mark.parametrize(
    ("model", "ids", "length", "error", "words"),
    [
        ("a model", torch.zeros(1, 16, dtype=torch.long), 8, TypeError, "GPT"),
        (None, torch.zeros(1, 15, dtype=torch.long), 8, ValueError, "2 \\* length"),
        (None, torch.zeros(1, 16, dtype=torch.long), 1, ValueError, "length"),
        (None, torch.full((1, 16), 99), 8, ValueError, "vocabulary|ids"),
        (None, torch.zeros(1, 16), 8, (TypeError, ValueError), "ids"),
    ],
)
def test_measure_refuses_bad_input_by_name(model, ids, length, error, words):
    with pytest.raises(error, match=words):
        measure(tiny_model() if model is None else model, ids, length)


def test_training_logs_every_few_steps_and_keeps_snapshots():
    result = train_model(2, TINY)
    log = result["log"]
    assert log["step"] == [0, 2, 4, 6]
    assert log["induction"].shape == log["previous_token"].shape == (4, 2, 2)
    assert len(log["second_copy_loss"]) == 4 and all(
        math.isfinite(x) for x in log["first_copy_loss"]
    )
    assert sorted(result["snapshots"]) == [0, 3, 6]
    final = result["model"].state_dict()
    assert all(torch.equal(final[k], v) for k, v in result["snapshots"][6].items())
    assert not all(torch.equal(final[k], v) for k, v in result["snapshots"][0].items())
    assert not result["model"].training


def test_training_twice_gives_the_same_weights_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    first, second = train_model(1, TINY), train_model(1, TINY)
    assert torch.get_num_threads() == threads
    for key, value in first["model"].state_dict().items():
        assert torch.equal(value, second["model"].state_dict()[key]), key


@pytest.mark.parametrize(
    ("layers", "recipe", "words"),
    [(0, TINY, "num_layers"), (2, "a recipe", "Recipe"), (1.5, TINY, "num_layers")],
)
def test_training_refuses_bad_arguments(layers, recipe, words):
    with pytest.raises((TypeError, ValueError), match=words):
        train_model(layers, recipe)


def test_a_saved_file_loads_back_the_same_models_logs_and_snapshots(tmp_path):
    path = tmp_path / "induction.pt"
    seconds = train_and_save(path, TINY)
    assert set(seconds) == set(MODEL_LAYERS)
    loaded = load_training(path)
    assert loaded["recipe"] == TINY
    again = train_model(2, TINY)
    for key, value in again["model"].state_dict().items():
        assert torch.equal(loaded["models"]["two-layer"].state_dict()[key], value)
    assert loaded["logs"]["two-layer"]["step"] == again["log"]["step"]
    assert sorted(loaded["snapshots"]["one-layer"]) == [0, 3, 6]
    assert len(loaded["models"]["one-layer"].blocks) == 1
    assert set(load_models(path)) == {"one-layer", "two-layer"}


def test_a_damaged_or_foreign_file_is_refused(tmp_path):
    path = tmp_path / "induction.pt"
    train_and_save(path, TINY)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="checksum|make induction-models"):
        load_training(path)
    save_checkpoint(path, {"recipe": {}, "weights": {}, "logs": {}, "snapshots": {}})
    with pytest.raises(CheckpointError, match="recipe"):
        load_training(path)


def test_the_shipped_two_layer_model_predicts_the_second_copy_and_the_one_layer_does_not():
    models = load_models()
    ids = repeated_sequences(256, 24, 64, torch.Generator().manual_seed(123))
    two, one = measure(models["two-layer"], ids, 24), measure(models["one-layer"], ids, 24)
    for found in (one, two):
        assert abs(found["first_copy_loss"] - math.log(64)) < 0.15
    assert two["second_copy_loss"] < two["first_copy_loss"] / 2
    assert one["second_copy_loss"] > 0.75 * one["first_copy_loss"]
    assert two["induction"][1].max() > 0.5 and two["previous_token"][0].max() > 0.3
