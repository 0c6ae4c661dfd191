"""helpers.induction's training half: the training batches, measure(), the recipe, training,
the saved file, and what the shipped models do."""

import copy
import dataclasses
import math
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import validation
from helpers.checkpoints import CheckpointError, save_checkpoint
from helpers.gpt import GPT, GPTConfig
from helpers.induction import (
    LARGEST_LEARNING_RATE,
    MODEL_LAYERS,
    MOST_FILE_BYTES,
    MOST_STEPS,
    Recipe,
    _parameter_count,
    _saved_bytes,
    check_log,
    check_snapshots,
    induction_score,
    load_models,
    load_position_models,
    load_training,
    measure,
    model_config,
    placed_repeats,
    placement_map,
    previous_token_score,
    repeated_sequences,
    train_and_save,
    train_model,
    training_batch,
    zeroed_heads,
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
        position="rope",  # as the recipe builds them
    )
    model = GPT(config)
    with torch.no_grad():
        model.tokens.weight.normal_()
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
    last, first = result["snapshots"][6], result["snapshots"][0]
    assert all(v.dtype == torch.float16 for v in last.values())  # kept in half the bytes
    assert all(torch.equal(final[k].half(), v) for k, v in last.items())
    assert not all(torch.equal(final[k].half(), v) for k, v in first.items())
    assert last["tokens.weight"] is last["output.weight"]  # one tied weight: saved once
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
    ids = repeated_sequences(256, 24, 512, torch.Generator().manual_seed(123))
    two, one = measure(models["two-layer"], ids, 24), measure(models["one-layer"], ids, 24)
    for found in (one, two):
        assert abs(found["first_copy_loss"] - math.log(512)) < 0.15
    assert two["second_copy_loss"] < two["first_copy_loss"] / 2
    assert one["second_copy_loss"] > 0.75 * one["first_copy_loss"]
    assert two["induction"][1].max() > 0.5 and two["previous_token"][0].max() > 0.5


def test_the_shipped_two_layer_model_predicts_a_late_short_copy():
    model = load_models()["two-layer"]
    ids = placed_repeats(128, 48, 38, 5, 512, torch.Generator().manual_seed(7))
    found = measure(model, ids, 5, start=38)
    assert found["second_copy_accuracy"] > 0.8
    assert found["second_copy_loss"] < found["first_copy_loss"] / 2


def test_a_training_batch_places_the_copy_uniformly_over_every_start_and_gap_that_fit():
    recipe = Recipe(shortest_block=20, longest_block=20, batch_size=9000)
    ids = training_batch(recipe, torch.Generator().manual_seed(0))
    n, length = recipe.context_length, 20
    counts = {}
    for row in ids.tolist():
        assert len(set(row)) == n - length  # every token differs but the copy's
        seen = {}
        copy_start = next(t for t, token in enumerate(row) if seen.setdefault(token, t) != t)
        start = seen[row[copy_start]]
        gap = copy_start - start - length
        counts[start, gap] = counts.get((start, gap), 0) + 1
    room = n - 2 * length
    assert set(counts) == {(s, g) for s in range(room + 1) for g in range(room + 1 - s)}
    expected = 9000 / len(counts)  # 45 pairs, 200 each
    assert all(abs(count - expected) < 5 * math.sqrt(expected) for count in counts.values())


def test_measure_at_a_start_reads_the_block_and_copy_where_they_are():
    model = tiny_model()
    ids = placed_repeats(5, 16, 3, 4, 16, torch.Generator().manual_seed(2))
    placed = measure(model, ids, 4, start=3)
    alone = measure(model, ids[:, 3:11], 4)
    assert placed["second_copy_accuracy"] >= 0 and placed["first_copy_loss"] > 0
    assert not math.isclose(placed["second_copy_loss"], alone["second_copy_loss"])
    with pytest.raises(ValueError, match=r"ids\[:, 2:6\] == ids\[:, 6:10\], but row 0 is not"):
        measure(model, ids, 4, start=2)
    with pytest.raises(ValueError, match="at start 9 and its copy end at position 16"):
        measure(model, ids, 4, start=9)


def test_a_placement_map_covers_every_start_that_fits_and_nothing_else():
    model = tiny_model()
    found = placement_map(model, lengths=(2, 4, 8), rows=3)
    assert found["lengths"] == [2, 4, 8] and found["starts"] == list(range(13))
    for key in ("first_copy_loss", "second_copy_loss", "second_copy_accuracy"):
        table = found[key]
        assert table.shape == (3, 13) and table.dtype == torch.float64
        for i, length in enumerate((2, 4, 8)):
            fits = torch.arange(13) <= 16 - 2 * length
            assert not table[i, fits].isnan().any() and table[i, ~fits].isnan().all()
    again = placement_map(model, lengths=(2, 4, 8), rows=3)
    assert torch.allclose(again["second_copy_loss"], found["second_copy_loss"], equal_nan=True)


@pytest.mark.parametrize(
    ("lengths", "rows", "words"),
    [
        ((4, 2), 3, "increasing order"),
        ((2, 9), 3, "fitting twice in the context of 16"),
        ((), 3, "increasing order"),
        ((1,), 3, "a block length must be"),
        ("2 4", 3, "lengths must be a list of block lengths"),
        ((2,), 0, "rows"),
    ],
)
def test_a_placement_map_refuses_bad_arguments_by_name(lengths, rows, words):
    with pytest.raises((TypeError, ValueError), match=words):
        placement_map(tiny_model(), lengths=lengths, rows=rows)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"position": "alibi"}, "position must be one of learned, sinusoidal, rope"),
        ({"position": 1}, "position must be one of"),
        ({"vocab_size": 40}, r"vocab_size \(40\) must be at least context_length \(48\)"),
    ],
)
def test_a_recipe_names_a_position_and_a_vocabulary_it_cannot_train_with(changes, words):
    with pytest.raises(ValueError, match=words):
        Recipe(**changes)


# Regressions from a hostile pass


def test_measure_reads_int32_ids_as_it_reads_int64():
    model = tiny_model()
    ids = repeated_sequences(3, 8, 16, torch.Generator().manual_seed(1))
    as_int32, as_int64 = measure(model, ids.int(), 8), measure(model, ids, 8)
    for key in ("first_copy_loss", "second_copy_loss", "second_copy_accuracy"):
        assert as_int32[key] == as_int64[key]


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_measure_refuses_a_model_with_non_finite_weights(value):
    model = tiny_model()
    with torch.no_grad():
        model.tokens.weight[3, 0] = value
    with pytest.raises(ValueError, match="the model's weight tokens.weight holds NaN or inf"):
        measure(model, repeated_sequences(2, 8, 16), 8)


def test_measure_refuses_meta_tensors_by_name():
    ids = repeated_sequences(2, 8, 16)
    with pytest.raises(ValueError, match="the model is on the meta device"):
        measure(tiny_model().to("meta"), ids, 8)
    with pytest.raises(ValueError, match="ids are on the meta device"):
        measure(tiny_model(), ids.to("meta"), 8)


def test_measure_checks_the_heads_before_copying_the_model(monkeypatch):
    model, copies = tiny_model(), []
    monkeypatch.setattr(GPT, "__init__", lambda self, config: copies.append(config))
    with pytest.raises(ValueError, match="head 2 is out of range"):
        measure(model, repeated_sequences(2, 8, 16), 8, [(0, 2)])
    assert copies == []


def test_measure_and_training_leave_the_callers_random_numbers_alone():
    model, ids = tiny_model(), repeated_sequences(2, 8, 16)
    for run in (lambda: measure(model, ids, 8), lambda: train_model(1, TINY)):
        torch.manual_seed(7)
        expected = torch.rand(3)
        torch.manual_seed(7)
        run()
        assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"d_model": 63}, "d_model (63) must be divisible by num_heads (2)"),
        ({"num_heads": 3}, "d_model (128) must be divisible by num_heads (3)"),
        ({"eval_length": 1}, "eval_length must be >= 2"),
        ({"vocab_size": 2**63}, "vocab_size must be at most 2^31 - 1 = 2147483647, got 2^63"),
        ({"steps": 10**30}, "steps must be at most 2^31 - 1"),
    ],
)
def test_a_recipe_that_could_not_train_is_refused_when_it_is_made(changes, words):
    with pytest.raises(ValueError) as raised:
        Recipe(**changes)
    assert words.replace("2^63", str(2**63)) in str(raised.value)


@pytest.mark.parametrize(
    ("recipe", "generator", "error", "words"),
    [
        (None, torch.Generator(), TypeError, "recipe must be a Recipe, got NoneType"),
        ({"batch_size": 2}, torch.Generator(), TypeError, "recipe must be a Recipe, got dict"),
        (TINY, 0, TypeError, "generator must be a torch.Generator, got 0"),
        (TINY, "seed", TypeError, "generator must be a torch.Generator, got 'seed'"),
        (TINY, None, TypeError, "generator must be a torch.Generator, got None"),
    ],
)
def test_training_batch_refuses_bad_arguments_by_name(recipe, generator, error, words):
    with pytest.raises(error) as raised:
        training_batch(recipe, generator)
    assert words in str(raised.value)


def test_a_seed_at_the_top_of_torchs_range_trains():
    result = train_model(1, dataclasses.replace(TINY, seed=2**32 - 1, steps=1))
    assert result["log"]["step"] == [0]


@pytest.mark.parametrize("learning_rate", [1e6, 1e30])
def test_training_that_diverges_is_stopped_with_the_step_and_the_learning_rate(
    monkeypatch, learning_rate
):
    """A recipe refuses such rates (below); were one let through, training names it."""
    monkeypatch.setattr("helpers.induction.LARGEST_LEARNING_RATE", math.inf)
    with pytest.raises(ValueError) as raised:
        train_model(1, dataclasses.replace(TINY, learning_rate=learning_rate, weight_decay=0.0))
    assert "training diverged at step" in str(raised.value)
    assert f"the learning rate {learning_rate:g} is too large" in str(raised.value)


@pytest.mark.parametrize(
    ("where", "error", "words"),
    [
        ("missing/induction.pt", CheckpointError, "the folder"),
        (".", CheckpointError, "it is a folder; name a file inside it"),
        (None, TypeError, "path must be a file path (str or pathlib.Path), got None"),
    ],
)
def test_train_and_save_refuses_a_path_before_training(tmp_path, monkeypatch, where, error, words):
    trained = []
    monkeypatch.setattr("helpers.induction.train_model", lambda *args, **kw: trained.append(args))
    with pytest.raises(error) as raised:
        train_and_save(None if where is None else tmp_path / where, TINY)
    assert words in str(raised.value)
    assert trained == []


@pytest.fixture(scope="module")
def saved_contents(tmp_path_factory):
    path = tmp_path_factory.mktemp("induction") / "induction.pt"
    train_and_save(path, TINY)
    return torch.load(path, weights_only=True)


def changed(contents: dict, keys: tuple, value) -> dict:
    """A deep copy of contents with contents[keys[0]][keys[1]]... set to value (or deleted,
    for value DELETE)."""
    contents = copy.deepcopy(contents)
    target = contents
    for key in keys[:-1]:
        target = target[key]
    if value is DELETE:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return contents


DELETE = object()
SOME_WEIGHT = "blocks.0.attention.W_q.weight"


@pytest.mark.parametrize(
    ("keys", "value", "words"),
    [
        (("weights", "two-layer"), [1, 2], "weights should be a dict of tensors, found list"),
        (
            ("weights", "two-layer", SOME_WEIGHT),
            torch.zeros(8, 8, dtype=torch.int64),
            f"weight {SOME_WEIGHT} should be a floating-point tensor, found torch.int64",
        ),
        (("weights", "two-layer", SOME_WEIGHT), [[0.0]], "floating-point tensor, found list"),
        (("logs", "two-layer"), [1, 2], "(two-layer): its log should hold"),
        (("logs", "one-layer", "step"), DELETE, "its log should hold"),
        (("logs", "one-layer", "step"), 5, "its log's step should be a list"),
        (("logs", "one-layer", "second_copy_loss"), [1.0], "found a list of 1"),
        (("logs", "one-layer", "first_copy_loss"), ["low"] * 4, "should hold finite numbers only"),
        (("logs", "two-layer", "induction"), torch.zeros(2, 2), "(4, 2, 2) tensor, found (2, 2)"),
        (("logs", "two-layer", "previous_token"), [0.5], "tensor, found list"),
        (("snapshots", "one-layer"), [1], "its snapshots should be {step: weights}, found list"),
        (("snapshots", "one-layer"), {}, "found an empty dict"),
        (
            ("snapshots", "one-layer", "zero"),
            {},
            "snapshot_every (3) up to its steps (6): 0, 3, 6; found 'zero'",
        ),
        (("snapshots", "two-layer", 3), [1], "snapshot 3: its weights should be a dict"),
        (("snapshots", "two-layer", 3, SOME_WEIGHT), torch.zeros(1), "shape: " + SOME_WEIGHT),
        (("snapshots", "two-layer", 3, SOME_WEIGHT), DELETE, "missing: " + SOME_WEIGHT),
    ],
)
def test_a_file_whose_weights_logs_or_snapshots_are_not_as_saved_is_refused(
    tmp_path, saved_contents, keys, value, words
):
    path = tmp_path / "induction.pt"
    save_checkpoint(path, changed(saved_contents, keys, value))
    with pytest.raises(CheckpointError) as raised:
        load_training(path)
    assert words in str(raised.value)


def test_a_file_whose_last_snapshot_is_not_its_final_weights_is_refused(tmp_path, saved_contents):
    """A last snapshot with a weight's sign flipped loaded, and the explorer showed at the
    final step a model other than the one measured."""
    weight = "blocks.1.attention.W_q.weight"
    keys = ("snapshots", "two-layer", TINY.steps, weight)
    flipped = -saved_contents["snapshots"]["two-layer"][TINY.steps][weight]
    path = tmp_path / "induction.pt"
    save_checkpoint(path, changed(saved_contents, keys, flipped))
    with pytest.raises(CheckpointError) as raised:
        load_training(path)
    assert (
        f"(two-layer): its snapshot {TINY.steps}, at the recipe's last step, should hold the "
        f"final weights in float16, but its {weight} differs from the saved weight"
    ) in str(raised.value), str(raised.value)


# After a hostile pass: sizes refused by name before anything is built, logs that cannot be a
# training run's, and torch's random numbers left alone


HUGE = 10**5000  # more digits than Python prints


@pytest.mark.parametrize(
    "field", [f.name for f in dataclasses.fields(Recipe) if f.name != "learning_rate"]
)
@pytest.mark.parametrize("value", [HUGE, -HUGE], ids=["huge", "-huge"])
def test_a_recipe_names_an_int_too_large_to_print(field, value):
    with pytest.raises(ValueError) as raised:
        Recipe(**{field: value})
    assert f"{field} must be" in str(raised.value) and "int too large to print" in str(raised.value)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"batch_size": 2**31 - 1}, "batch_size * context_length * vocab_size = 52,776,558,"),
        ({"eval_batch": 2**30}, "eval_batch * context_length * vocab_size = 26,388,279,066,624"),
        ({"vocab_size": 2**31 - 1}, "logits in one batch, more than 2,147,483,648 (8 GiB"),
    ],
)
def test_a_recipe_whose_batches_torch_could_not_hold_is_refused(changes, words):
    with pytest.raises(ValueError) as raised:
        Recipe(**changes)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("changes", "layers", "words"),
    [
        ({"d_model": 2**20}, 2, "8,796,644,573,184 parameters, more than"),
        ({"d_model": 2**16}, 1, "17,213,947,904 parameters, more than"),
        ({"d_model": 2**12, "num_heads": 1}, 1, "a 1-layer model of this recipe would have 69,"),
        ({"d_model": 512}, 64, "a 64-layer model of this recipe would have 67,568,640"),
        ({"d_model": 1024}, 2, "a 2-layer model of this recipe would have 8,927,232 parameters"),
    ],
    ids=["d_model 2^20", "d_model 2^16", "d_model 2^12", "64 layers", "d_model 1024"],
)
def test_a_model_too_large_for_a_checkpoint_is_refused_before_it_is_built(
    monkeypatch, changes, layers, words
):
    built, build = [], GPT.__init__

    def recording(model, config):
        build(model, config)
        built.append(model.tokens.weight.device.type)

    monkeypatch.setattr(GPT, "__init__", recording)
    recipe = Recipe(**changes)
    for call in (
        lambda: model_config(recipe, layers),
        lambda: train_model(layers, recipe),
    ):
        with pytest.raises(ValueError) as raised:
            call()
        assert words in str(raised.value)
    assert set(built) <= {"meta"}  # counted before any model, or on the meta device


@pytest.mark.parametrize(
    "layers", [65, 2**31 - 1, 2**31, HUGE], ids=["65", "2^31-1", "2^31", "huge"]
)
def test_every_number_of_layers_too_large_is_refused_at_the_one_limit(layers):
    """2^31 and more were said to pass 2^31 - 1, where 65 already passes the limit, 64."""
    for call in (lambda: model_config(Recipe(), layers), lambda: train_model(layers)):
        with pytest.raises(ValueError) as raised:
            call()
        limit = f"num_layers must be at most {validation.MOST_LAYERS} blocks, got "
        assert str(raised.value).startswith(limit), str(raised.value)


@pytest.mark.parametrize("loader", [load_training, load_position_models])
@pytest.mark.parametrize("path", ["/tmp/\ud800.pt", Path("/tmp/\ud800.pt"), "/tmp/\ud800/a.pt"])
def test_a_checkpoint_named_with_a_lone_surrogate_is_refused_by_name(loader, path):
    """os.stat's UnicodeEncodeError came out of the loaders."""
    with pytest.raises(CheckpointError) as raised:
        loader(path)
    assert str(raised.value).startswith(f"cannot read {ascii(str(path))}: its name holds")
    assert "'\\ud800', which utf-8 cannot encode" in str(raised.value)


def test_model_config_counts_the_parameters_a_model_has():
    for layers in (1, 2, 5):
        config = model_config(Recipe(), layers)
        assert sum(p.numel() for p in GPT(config).parameters()) == _parameter_count(config)


def test_model_config_refuses_what_is_not_a_recipe():
    with pytest.raises(TypeError, match="recipe must be a Recipe, got str"):
        model_config("recipe", 2)


def test_train_and_save_checks_both_models_before_training(tmp_path, monkeypatch):
    trained = []
    monkeypatch.setattr("helpers.induction.train_model", lambda *args, **kw: trained.append(args))
    with pytest.raises(ValueError, match="a 2-layer model of this recipe would have"):
        train_and_save(tmp_path / "big.pt", Recipe(d_model=1024, batch_size=1, eval_batch=1))
    assert trained == []


@pytest.mark.parametrize(
    ("recipe", "words"),
    [
        ({"vocab_size": 2**31 - 1}, "its recipe is not a valid one (batch_size * context_length"),
        ({"vocab_size": 2**20, "batch_size": 1, "eval_batch": 1}, "would have 8,388,928"),
        ({"d_model": 2**22}, "its recipe builds no loadable model ("),
        ({"context_length": 2**31 - 1, "batch_size": 1, "eval_batch": 1}, "its recipe"),
    ],
)
def test_a_crafted_recipe_is_refused_before_a_model_is_built(
    tmp_path, saved_contents, monkeypatch, recipe, words
):
    """With a valid checksum: 2^31 - 1 ended in torch's "can't allocate memory", and 2^22
    allocated a gigabyte before its weights' shapes were refused."""
    path = tmp_path / "induction.pt"
    contents = copy.deepcopy(saved_contents)
    contents["recipe"].update(recipe)
    save_checkpoint(path, contents)
    monkeypatch.setattr("helpers.induction.blank_model", lambda config: pytest.fail("built"))
    with pytest.raises(CheckpointError) as raised:
        load_training(path)
    assert words in str(raised.value) and str(path) in str(raised.value)


@pytest.mark.parametrize(
    ("keys", "value", "words"),
    [
        (("logs", "two-layer", "step", 1), 0, "in increasing order, found [0, 0, 4, 6]"),
        (("logs", "two-layer", "step", 0), -2, "whole numbers >= 0 in increasing order"),
        (("logs", "two-layer", "step", 0), True, "its log's step should be a list of training"),
        (("logs", "two-layer", "step"), [], "its log's step should be a list of training steps"),
        (("logs", "two-layer", "second_copy_loss", 0), -3.0, "each in 0..inf, found -3.0"),
        (("logs", "two-layer", "first_copy_loss", 0), 10**400, "finite numbers only, each in 0"),
        (("logs", "two-layer", "second_copy_accuracy", 0), 5.0, "accuracy should hold finite"),
        (("logs", "one-layer", "second_copy_accuracy", 1), 1.5, "accuracy should hold finite"),
        (("logs", "one-layer", "second_copy_loss", 1), "low", "finite numbers only, each in 0.."),
        (
            ("logs", "two-layer", "induction", 0, 0, 0),
            7.0,
            "scores should be means of attention weights, each in 0..1, found 7.0 at (0, 0, 0)",
        ),
    ],
)
def test_a_log_that_no_training_run_writes_is_refused(tmp_path, saved_contents, keys, value, words):
    path = tmp_path / "induction.pt"
    contents = copy.deepcopy(saved_contents)
    target = contents
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    save_checkpoint(path, contents)
    with pytest.raises(CheckpointError) as raised:
        load_training(path)
    assert words in str(raised.value), str(raised.value)


def test_a_log_of_integer_scores_is_refused(tmp_path, saved_contents):
    path = tmp_path / "induction.pt"
    contents = copy.deepcopy(saved_contents)
    contents["logs"]["two-layer"]["previous_token"] = torch.zeros(4, 2, 2, dtype=torch.int64)
    save_checkpoint(path, contents)
    with pytest.raises(
        CheckpointError,
        match="its log.s previous_token should be an ordinary dense floating-point tensor, "
        "found one torch.int64",
    ):
        load_training(path)


def test_a_snapshot_with_a_non_finite_weight_is_refused():
    model = tiny_model()
    snapshot = {key: value.clone() for key, value in model.state_dict().items()}
    snapshot["norm.weight"][0] = float("nan")
    with pytest.raises(CheckpointError, match="snapshot 3: its weight norm.weight holds NaN"):
        check_snapshots("here", {0: model.state_dict(), 3: snapshot, 6: snapshot}, TINY, 2)


@pytest.mark.parametrize("load", [load_training, load_models], ids=["load_training", "load_models"])
def test_loading_leaves_the_callers_random_numbers_alone(load):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    load()
    assert torch.equal(torch.rand(3), expected)


def test_a_training_batch_never_draws_from_torchs_global_generator():
    before = torch.random.get_rng_state()
    training_batch(TINY, torch.Generator().manual_seed(0))
    assert torch.equal(torch.random.get_rng_state(), before)


def test_measure_names_a_length_too_large_to_print():
    with pytest.raises(ValueError, match="length must be a whole number >= 2, got an int too"):
        measure(tiny_model(), repeated_sequences(2, 8, 16), -HUGE)
    with pytest.raises(ValueError, match=r"\(B, an int too large to print\), a block and its"):
        measure(tiny_model(), repeated_sequences(2, 8, 16), HUGE)


def test_measure_refuses_logits_that_overflow():
    model = tiny_model().double()
    with torch.no_grad():
        model.tokens.weight[3] = 1e300  # finite in float64, its square is not
    ids = repeated_sequences(2, 8, 16, torch.Generator().manual_seed(0))
    ids[:, [0, 8]] = 3  # in the block and in its copy
    with pytest.raises(ValueError, match="the logits overflow to inf or NaN in torch.float64"):
        measure(model, ids, 8)


# Regressions from a second hostile pass


def _one_token_of_row_2_changed(ids):
    ids = ids.clone()
    ids[2, 15] = (ids[2, 7] + 1) % 16  # the copy's last token differs from the block's
    return ids


@pytest.mark.parametrize(
    ("change", "row"),
    [
        (lambda ids: torch.randint(16, ids.shape, generator=torch.Generator().manual_seed(1)), 0),
        (lambda ids: torch.cat([ids[:, :8], ids[:, 8:].flip(1)], 1), 0),
        (_one_token_of_row_2_changed, 2),
    ],
    ids=["random", "reversed copy", "one token of row 2"],
)
def test_measure_refuses_ids_that_are_not_a_block_and_its_copy(change, row):
    """torch.randint(64, (4, 48)) and a copy reversed with .flip(1) were measured as repeats."""
    ids = change(repeated_sequences(3, 8, 16, torch.Generator().manual_seed(0)))
    with pytest.raises(
        ValueError, match=f"a block followed by its exact copy.*but row {row} is not"
    ):
        measure(tiny_model(), ids, 8)


def crafted(tmp_path, contents: dict):
    path = tmp_path / "crafted.pt"
    save_checkpoint(path, contents)
    return path


@pytest.mark.parametrize(
    ("keys", "value"),
    [
        (("weights", "two-layer", "norm.bias"), torch.full((8,), 1e39, dtype=torch.float64)),
        (("weights", "one-layer", SOME_WEIGHT), torch.full((8, 8), 1e300, dtype=torch.float64)),
        (("snapshots", "two-layer", 3, "norm.bias"), torch.full((8,), -1e39, dtype=torch.float64)),
    ],
    ids=["1e39 bias", "1e300 W_q", "-1e39 in a snapshot"],
)
def test_weights_that_overflow_float32_are_refused(tmp_path, saved_contents, keys, value):
    """A float64 weight of 1e39 is finite, and inf once cast to float32: it loaded as inf."""
    path = crafted(tmp_path, changed(saved_contents, keys, value))
    with pytest.raises(CheckpointError, match=f"its weight {keys[-1]} holds NaN or inf in float32"):
        load_training(path)


@pytest.mark.parametrize(
    ("keys", "value", "words"),
    [
        (
            ("logs", "two-layer", "step", -1),
            10**30,
            "up to its steps (6): 0, 2, 4, 6; found 1000000000000000000000000000000",
        ),
        (("logs", "two-layer", "step", -1), 7, "multiple of the recipe's log_every (2) up to"),
        (("logs", "one-layer", "step", 1), 3, "up to its steps (6): 0, 2, 4, 6; found 3"),
        (("snapshots", "two-layer", 12345), None, "snapshot_every (3) up to its steps (6): 0, 3,"),
        (("snapshots", "two-layer", 10**30), None, "snapshots' steps should be the 3 steps"),
        (("snapshots", "one-layer", 10**400), None, "multiple of the recipe's snapshot_every"),
        (("snapshots", "one-layer", 4), None, "up to its steps (6): 0, 3, 6; found 4"),
    ],
)
def test_steps_off_the_recipes_grid_are_refused(tmp_path, saved_contents, keys, value, words):
    """check_log and check_snapshots took any increasing steps: 10**30, or 12345."""
    if value is None:  # a snapshot under a step no run keeps: a copy of step 0's weights
        value = saved_contents["snapshots"][keys[1]][0]
    with pytest.raises(CheckpointError) as raised:
        load_training(crafted(tmp_path, changed(saved_contents, keys, value)))
    assert words in str(raised.value), str(raised.value)


def _log_rows_kept(contents: dict, name: str, rows: int) -> dict:
    contents = copy.deepcopy(contents)
    log = contents["logs"][name]
    for key in log:
        log[key] = log[key][:rows]
    return contents


def _snapshots_kept(contents: dict, name: str, steps: list[int]) -> dict:
    contents = copy.deepcopy(contents)
    kept = contents["snapshots"][name]
    contents["snapshots"][name] = {step: kept[step] for step in steps}
    return contents


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda c: changed(c, ("recipe", "steps"), 12),
            "(one-layer): its log's steps should be the 7 steps train_model writes, every "
            "multiple of the recipe's log_every (2) up to its steps (12): 0, 2, ..., 12; step 8 "
            "and 2 more missing",
        ),
        (
            lambda c: changed(c, ("recipe", "log_every"), 1),
            "log_every (1) up to its steps (6): 0, 1, ..., 6; step 1 and 2 more missing",
        ),
        (
            lambda c: changed(c, ("recipe", "snapshot_every"), 1),
            "(one-layer): its snapshots' steps should be the 7 steps train_model writes, every "
            "multiple of the recipe's snapshot_every (1) up to its steps (6): 0, 1, ..., 6; step 1 "
            "and 3 more missing",
        ),
        (
            lambda c: _log_rows_kept(c, "two-layer", 3),
            "(two-layer): its log's steps should be the 4 steps train_model writes, every "
            "multiple of the recipe's log_every (2) up to its steps (6): 0, 2, 4, 6; step 6 "
            "missing",
        ),
        (
            lambda c: _snapshots_kept(c, "two-layer", [0, 6]),
            "(two-layer): its snapshots' steps should be the 3 steps train_model writes, every "
            "multiple of the recipe's snapshot_every (3) up to its steps (6): 0, 3, 6; step 3 "
            "missing",
        ),
        (
            lambda c: _snapshots_kept(c, "one-layer", [0]),
            "(one-layer): its snapshots' steps should be the 3 steps train_model writes, every "
            "multiple of the recipe's snapshot_every (3) up to its steps (6): 0, 3, 6; step 3 "
            "and 1 more missing",
        ),
    ],
    ids=[
        "steps doubled",
        "log_every 1",
        "snapshot_every 1",
        "last log row cut",
        "snapshot missing",
        "snapshot 0 only",
    ],
)
def test_logs_and_snapshots_must_hold_every_step_training_writes(
    tmp_path, saved_contents, change, words
):
    """Steps on the recipe's grid passed though training writes others: a recipe of 8000 steps
    with logs up to 4000, rows every 25 under log_every 5, a snapshot missing, snapshot 0 only."""
    with pytest.raises(CheckpointError) as raised:
        load_training(crafted(tmp_path, change(saved_contents)))
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    "load", [load_training, load_models, load_position_models], ids=lambda load: load.__name__
)
def test_an_empty_path_is_named_as_such(load):
    """load_training('') said ". is a folder, not a checkpoint file"."""
    with pytest.raises(CheckpointError, match=r"^path is empty \(''\): name a checkpoint file$"):
        load("")


@pytest.mark.parametrize("seed", [2**32, 2**33 + 5, 2**64 - 1])
def test_seeds_that_torch_reads_as_another_are_refused(seed):
    """torch's cpu generator reads a seed's low 32 bits: seed 2^32 drew what seed 0 draws."""
    with pytest.raises(ValueError, match=r"seed must be below 2\^32, got .*low 32 bits"):
        Recipe(seed=seed)


def test_torchs_cpu_generator_reads_only_a_seeds_low_32_bits():
    """Why seeds stop at 2^32 - 1 (if torch ever reads more, the bound can go)."""
    low = repeated_sequences(1, 4, 64, torch.Generator().manual_seed(0))
    assert torch.equal(repeated_sequences(1, 4, 64, torch.Generator().manual_seed(2**32)), low)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {
                "vocab_size": 2**28,
                "context_length": 8,
                "batch_size": 1,
                "eval_batch": 1,
                "longest_block": 4,
                "eval_length": 4,
            },
            "training_batch draws each row's different tokens from a random order of the whole "
            "vocabulary, at most 2^20 = 1,048,576 tokens (vocab_size) and 2^23 = 8,388,608 in "
            "one call (batch_size x vocab_size), got batch_size 1, vocab_size 268435456",
        ),
        (
            {"vocab_size": 2**17 + 1, "batch_size": 64, "eval_batch": 1},
            "(batch_size x vocab_size), got batch_size 64, vocab_size 131073",
        ),
        (
            {
                "eval_batch": 2**25,
                "eval_length": 4,
                "context_length": 8,
                "vocab_size": 8,
                "longest_block": 4,
            },
            "the held-out repeated_sequences would allocate 3221225472 bytes at its peak",
        ),
    ],
)
def test_a_recipe_whose_ids_torch_could_not_hold_is_refused(changes, words):
    """Recipe(vocab_size=2, context_length=2**30, ...) passed, and training_batch asked torch
    for 8 GiB of ids."""
    with pytest.raises(ValueError) as raised:
        Recipe(**changes)
    assert words in str(raised.value), str(raised.value)


def test_check_log_names_a_recipe_that_is_not_one(saved_contents):
    """check_log('w', log, None) raised AttributeError 'num_layers'."""
    with pytest.raises(TypeError, match="recipe must be a Recipe, got NoneType"):
        check_log("w", saved_contents["logs"]["two-layer"], None, 2)
    with pytest.raises(TypeError, match="recipe must be a Recipe, got NoneType"):
        check_snapshots("w", saved_contents["snapshots"]["two-layer"], None, 2)


def test_check_log_names_numbers_that_are_not_pythons(saved_contents):
    """numpy's float64 losses were said not to be "finite numbers", which they are."""
    log = copy.deepcopy(saved_contents["logs"]["two-layer"])
    log["first_copy_loss"] = [np.float64(loss) for loss in log["first_copy_loss"]]
    with pytest.raises(CheckpointError) as raised:
        check_log("w", log, TINY, 2)
    assert "its log's first_copy_loss should hold Python ints or floats, found np.float64(" in str(
        raised.value
    )
    assert "(numpy.float64)" in str(raised.value) and "finite" not in str(raised.value)


@pytest.mark.parametrize(
    ("key", "make", "words"),
    [
        ("first_copy_loss", torch.tensor, "first_copy_loss should hold Python ints or floats"),
        ("step", np.int64, "step should hold Python ints, found np.int64(0) (numpy.int64)"),
    ],
)
def test_check_log_names_a_tensor_loss_or_a_numpy_step(saved_contents, key, make, words):
    """A tensor loss was "not finite in 0..inf, found tensor(1.)"; numpy steps were not
    "whole numbers >= 0", found [np.int64(0), ...]."""
    log = copy.deepcopy(saved_contents["logs"]["two-layer"])
    log[key] = [make(value) for value in log[key]]
    with pytest.raises(CheckpointError) as raised:
        check_log("w", log, TINY, 2)
    assert words in str(raised.value) and "finite" not in str(raised.value)
    assert "whole numbers" not in str(raised.value)


def _meta(tensor):
    return torch.empty_like(tensor, device="meta")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_meta, "induction must be an ordinary dense tensor, got one on the meta device"),
        (lambda t: t.to_sparse(), "induction must be an ordinary dense tensor, got one torch.sp"),
        (lambda t: t.to(torch.complex64), "dense floating-point tensor, found one torch.complex64"),
        (lambda t: torch.nested.nested_tensor(list(t)), "ordinary dense tensor, got one nested"),
        (lambda t: t.to(torch.float8_e4m3fn), "got torch.float8_e4m3fn, a storage format"),
        (lambda t: t.to(torch.float8_e5m2), "got torch.float8_e5m2, a storage format"),
    ],
    ids=["meta", "sparse", "complex", "nested", "float8_e4m3fn", "float8_e5m2"],
)
def test_check_log_names_scores_that_are_not_dense_real_tensors(saved_contents, make, words):
    """item() on meta, NotImplementedError on sparse, float8 ("ge_cpu" not implemented) and
    nested tensors ("NestedTensorImpl doesn't support sizes"), and complex scores reached
    torch."""
    log = copy.deepcopy(saved_contents["logs"]["two-layer"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype, torch warns
        log["induction"] = make(log["induction"].float())
    with pytest.raises(CheckpointError) as raised:
        check_log("w", log, TINY, 2)
    assert str(raised.value).startswith("w: its log's induction ")
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("make", "words"),
    [(_meta, "on the meta device (no values)"), (lambda t: t.to_sparse(), "torch.sparse_coo")],
    ids=["meta", "sparse"],
)
def test_check_snapshots_names_weights_that_are_not_dense(saved_contents, make, words):
    snapshots = copy.deepcopy(saved_contents["snapshots"]["two-layer"])
    snapshots[3]["norm.bias"] = make(snapshots[3]["norm.bias"])
    with pytest.raises(CheckpointError) as raised:
        check_snapshots("w", snapshots, TINY, 2)
    assert "w snapshot 3: its weight norm.bias should be an ordinary dense tensor" in str(
        raised.value
    )
    assert words in str(raised.value), str(raised.value)


# Regressions from a fifth hostile pass


def _tokens_weight(contents: dict, keys: tuple) -> torch.Tensor:
    weights = contents
    for key in keys:
        weights = weights[key]
    return weights["tokens.weight"]


@pytest.mark.parametrize("keys", [("weights", "two-layer"), ("snapshots", "one-layer", 3)])
@pytest.mark.parametrize("load", [load_training, load_models], ids=["load_training", "load_models"])
def test_a_file_whose_tied_weights_differ_is_refused(tmp_path, saved_contents, keys, load):
    """output.weight, which GPT ties to tokens.weight, silently overwrote the embedding."""
    output = _tokens_weight(saved_contents, keys) + 1.0
    path = tmp_path / "induction.pt"
    save_checkpoint(path, changed(saved_contents, (*keys, "output.weight"), output))
    with pytest.raises(CheckpointError) as raised:
        load(path)
    assert "its weights tokens.weight and output.weight differ, but the model ties them" in str(
        raised.value
    )


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        (("recipe", 5), "its recipe should hold ['batch_size'"),
        (("weights", 0), "its weights should name ['one-layer', 'two-layer'], found [0, 'one-"),
        (("logs", None), "its logs should name ['one-layer', 'two-layer'], found [None, 'one-"),
        (("snapshots", 1.5), "its snapshots should name ['one-layer', 'two-layer'], found [1.5,"),
    ],
)
def test_keys_of_mixed_types_are_named_not_sorted_into_a_type_error(
    tmp_path, saved_contents, keys, words
):
    """'<' not supported between instances of 'int' and 'str', while building the message."""
    path = tmp_path / "induction.pt"
    save_checkpoint(path, changed(saved_contents, keys, {}))
    with pytest.raises(CheckpointError) as raised:
        load_training(path)
    assert words in str(raised.value), str(raised.value)


def test_measure_refuses_a_model_with_heads_zeroed_by_an_open_block():
    """The block's hooks were dropped with the float64 copy: accuracy 0.895, not 0.020."""
    model = tiny_model()
    ids = repeated_sequences(3, 8, 16, torch.Generator().manual_seed(1))
    expected = measure(model, ids, 8, heads_zeroed=[(1, 0)])
    with zeroed_heads(model, [(1, 0)]):
        with pytest.raises(ValueError, match=r"open zeroed_heads block.*heads_zeroed="):
            measure(model, ids, 8)
    after = measure(model, ids, 8, heads_zeroed=[(1, 0)])  # the block left nothing behind
    assert after["second_copy_loss"] == expected["second_copy_loss"]
    assert torch.equal(after["induction"], expected["induction"])


def test_measure_refuses_a_model_with_forward_hooks():
    model = tiny_model()
    ids = repeated_sequences(3, 8, 16, torch.Generator().manual_seed(1))
    handle = model.blocks[0].attention.register_forward_hook(lambda *arguments: None)
    with pytest.raises(ValueError, match="blocks.0.attention has forward hooks"):
        measure(model, ids, 8)
    handle.remove()
    measure(model, ids, 8)


def _probed(model: GPT) -> GPT:
    model.probe = torch.nn.Parameter(torch.zeros(1))  # a weight no GPT has
    return model


def _without_W_o_bias(model: GPT) -> GPT:
    model.blocks[1].attention.W_o = torch.nn.Linear(8, 8, bias=False)
    return model


def _untied(model: GPT) -> GPT:
    model.output.weight = torch.nn.Parameter(model.tokens.weight.detach() + 1.0)
    return model


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_without_W_o_bias, "do not fit its config (missing: blocks.1.attention.W_o.bias)"),
        (_probed, "do not fit its config (unexpected: probe)"),
        (_untied, "tokens.weight and output.weight differ, but the model ties them"),
    ],
    ids=["W_o without bias", "an extra parameter", "untied"],
)
def test_measure_names_weights_a_plain_gpt_of_the_config_does_not_hold(make, words):
    """torch's "Error(s) in loading state_dict for GPT", or an untied output layer dropped."""
    model = make(tiny_model()).eval()
    ids = repeated_sequences(2, 8, 16, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError) as raised:
        measure(model, ids, 8)
    assert "measure computes on a float64 copy of the model in a plain GPT" in str(raised.value)
    assert words in str(raised.value), str(raised.value)


def test_measure_refuses_a_batch_it_could_not_hold_before_copying_the_model(monkeypatch):
    """It runs a float64 copy and keeps every layer's attention maps: the largest batch the
    forward pass's own guard let through needed about 6.5 GB."""
    monkeypatch.setattr("helpers.induction.blank_model", lambda config: pytest.fail("copied"))
    ids = repeated_sequences(50_000, 8, 16, torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="measure would allocate .* rows 50000, positions 16"):
        measure(tiny_model(), ids, 8)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"learning_rate": 1e38}, f"learning_rate must be at most {LARGEST_LEARNING_RATE:g}"),
        ({"learning_rate": 1e300}, "got 1e+300"),
        ({"weight_decay": 1e4}, "learning_rate x weight_decay must be below 1, got 0.001 x 10000"),
        ({"learning_rate": 0.5, "weight_decay": 2}, "would zero it or flip its sign"),
        ({"steps": 2**31 - 1}, f"steps must be at most {MOST_STEPS:,}"),
    ],
)
def test_a_recipe_with_a_rate_or_a_length_no_training_survives_is_refused(changes, words):
    """AdamW raised "value cannot be converted to type float without overflow", a weight decay
    of 1e4 was reported as a learning rate too large, and 2^31 - 1 steps trained for days."""
    with pytest.raises(ValueError) as raised:
        Recipe(**changes)
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"snapshot_every": 1}, "4,001 snapshots of each would take"),
        (
            {"batch_size": 2**11, "context_length": 512},
            "a batch: 2,048 rows x 512 positions would make a tensor",
        ),
        ({"eval_batch": 2**15}, "measure on the held-out sequences would allocate"),
    ],
    ids=["1.6 GB of snapshots", "a batch the model refuses", "a held-out measure too large"],
)
@pytest.mark.parametrize("train", ["train_model", "train_and_save"])
def test_a_recipe_that_training_would_fail_on_is_refused_before_training(
    tmp_path, monkeypatch, changes, words, train
):
    """Refused only after minutes, or never: the batch's size guard was reported as a
    divergence, and the snapshots were written (731 MB)."""
    monkeypatch.setattr("helpers.induction._train", lambda *arguments: pytest.fail("trained"))
    recipe = Recipe(**changes)
    with pytest.raises(ValueError) as raised:
        if train == "train_model":
            train_model(2, recipe)
        else:
            train_and_save(tmp_path / "induction.pt", recipe)
    assert words in str(raised.value), str(raised.value)
    assert not (tmp_path / "induction.pt").exists()


def test_the_saved_file_is_the_size_its_count_says(saved_contents, tmp_path):
    """The count of the bytes train_and_save writes (which refuses more than MOST_FILE_BYTES)
    is the file's size, to the few hundred bytes of the recipe and the archives' headers."""
    path = tmp_path / "induction.pt"
    save_checkpoint(path, saved_contents)
    counted = _saved_bytes(TINY, [model_config(TINY, layers) for layers in MODEL_LAYERS.values()])
    assert abs(counted - path.stat().st_size) < 0.01 * path.stat().st_size
    assert _saved_bytes(Recipe(), [model_config(Recipe(), 2)]) < MOST_FILE_BYTES


def test_train_and_save_names_a_path_it_cannot_write_before_training(tmp_path, monkeypatch):
    """A folder that is a file was said not to exist; '/proc/x.pt', a checksum path that is a
    folder and a NUL byte failed after the training, with FileNotFoundError, IsADirectoryError
    (leaving x.pt without its checksum) and 'embedded null byte'."""
    monkeypatch.setattr("helpers.induction._train", lambda *arguments: pytest.fail("trained"))
    (tmp_path / "notes.txt").write_text("a file")
    (tmp_path / "clash.pt.sha256").mkdir()
    cases = {
        tmp_path / "notes.txt" / "x.pt": "the folder " + str(tmp_path / "notes.txt") + " is a file",
        tmp_path / "clash.pt": "its checksum would go to " + str(tmp_path / "clash.pt.sha256"),
        str(tmp_path / "a\0b.pt"): "a file name holds no NUL byte",
    }
    if Path("/proc").is_dir():
        cases[Path("/proc/x.pt")] = "the folder /proc cannot be written to"
    for path, words in cases.items():
        with pytest.raises(CheckpointError) as raised:
            train_and_save(path, TINY)
        assert words in str(raised.value), str(raised.value)
    assert not (tmp_path / "clash.pt").exists()


def test_the_position_models_train_save_and_load_with_the_other_two_ways_of_positions(tmp_path):
    from helpers.induction import load_position_models, train_and_save_positions

    path = tmp_path / "positions.pt"
    seconds = train_and_save_positions(path, TINY)
    assert sorted(seconds) == ["learned", "sinusoidal"]
    models = load_position_models(path)
    assert {name: model.config.position for name, model in models.items()} == {
        "learned": "learned",
        "sinusoidal": "sinusoidal",
    }
    assert all(not model.training and model.config.num_layers == 2 for model in models.values())
    again = tmp_path / "again.pt"
    train_and_save_positions(again, TINY)
    assert path.read_bytes() == again.read_bytes()  # one thread: the same bytes


def test_a_position_file_that_names_other_models_is_refused(tmp_path):
    from helpers.induction import load_position_models

    path = tmp_path / "positions.pt"
    save_checkpoint(path, {"recipe": dataclasses.asdict(TINY), "weights": {"rope": {}}})
    with pytest.raises(
        CheckpointError, match=r"its weights should name \['learned', 'sinusoidal'\]"
    ):
        load_position_models(path)


# Regressions from a seventh hostile pass


@pytest.mark.parametrize(
    "start", [False, 0.0, "", [], np.array([0]), torch.tensor(0.0), torch.tensor([1, 2])]
)
def test_a_start_that_is_not_a_whole_number_is_refused_not_read_as_zero(start):
    """`start or 0` read False, 0.0, '' and [] as 0, and a two-element tensor raised torch's
    'ambiguous' error."""
    model = tiny_model()
    ids = placed_repeats(2, 16, 0, 4, 16, torch.Generator().manual_seed(0))
    for call in (
        lambda: induction_score(torch.eye(16)[None], 4, start),
        lambda: measure(model, ids, 4, start=start),
    ):
        with pytest.raises((TypeError, ValueError), match="start"):
            call()


@pytest.mark.parametrize(
    ("lengths", "words"),
    [
        (__import__("itertools").count(2), "at most 8 block lengths"),
        (torch.tensor(4), "lengths must be a list of block lengths"),
        (np.array(4), "lengths must be a list of block lengths"),
    ],
    ids=["endless", "0-d tensor", "0-d array"],
)
def test_a_placement_map_names_lengths_it_cannot_read(lengths, words):
    with pytest.raises((TypeError, ValueError), match=words):
        placement_map(tiny_model(), lengths=lengths, rows=1)


def test_a_placement_map_names_a_vocabulary_smaller_than_the_context():
    config = GPTConfig(
        vocab_size=10, context_length=16, d_model=8, num_heads=2, num_layers=1, d_ff=8,
        attention_only=True,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"vocabulary \(10 tokens\) is smaller than its context"):
        placement_map(GPT(config), lengths=[2], rows=1)


def test_a_placement_map_over_a_vocabulary_too_large_to_shuffle_names_itself():
    """A vocabulary above what placed_repeats shuffles for a row, within measure's
    bytes: the refusal named placed_repeats, which the caller never called (a thirteenth
    hostile pass)."""
    config = GPTConfig(
        vocab_size=2**20 + 1, context_length=4, d_model=8, num_heads=2, num_layers=1, d_ff=8,
        attention_only=True, position="rope",
    )  # fmt: skip
    with pytest.raises(ValueError) as raised:
        placement_map(GPT(config), lengths=[2], rows=1)
    assert str(raised.value).startswith(
        "placement_map draws each row's different tokens from a random order of the whole "
        "vocabulary, at most 2^20"
    ), str(raised.value)
    assert str(raised.value).endswith("got rows 1, vocab_size 1048577"), str(raised.value)


def test_a_recipes_position_is_kept_as_a_plain_str():
    assert type(Recipe(position=np.str_("rope")).position) is str


def test_snapshots_are_copies_and_a_weight_float16_cannot_hold_is_named():
    from helpers.induction import _half_weights

    model = tiny_model().half()
    kept = _half_weights(model)
    with torch.no_grad():
        model.norm.weight.add_(1.0)
    assert not torch.equal(kept["norm.weight"], model.norm.weight)  # a copy, not the weight
    large = tiny_model()
    with torch.no_grad():
        large.norm.weight[0] = 1e5
    with pytest.raises(ValueError, match="norm.weight holds a value beyond float16's range"):
        _half_weights(large)


# Regressions from an eighth hostile pass


def test_a_length_too_large_to_print_is_named_not_a_crash_of_the_message():
    with pytest.raises(ValueError, match="a block of an int too large to print"):
        placed_repeats(2, 10, 3, 10**5000, 20)


def test_a_placement_map_names_a_context_too_short_for_any_block():
    config = GPTConfig(
        vocab_size=5, context_length=1, d_model=8, num_heads=2, num_layers=1, d_ff=8,
        attention_only=True, position="rope",
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"context \(1\) is too short for a block of 2"):
        placement_map(GPT(config), lengths=[2], rows=1)


@pytest.mark.parametrize("state", ["no_grad", "inference_mode", "float64"])
def test_training_is_the_same_under_a_callers_grad_mode_or_default_dtype(state):
    """no_grad and inference_mode crashed inside backward; a float64 default trained other
    weights and wrote another file."""
    expected = train_model(1, TINY)["model"].state_dict()
    if state == "float64":
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            found = train_model(1, TINY)["model"].state_dict()
        finally:
            torch.set_default_dtype(before)
    else:
        with getattr(torch, state)():
            found = train_model(1, TINY)["model"].state_dict()
    assert all(torch.equal(found[key], value) for key, value in expected.items())


class SilencedGPT(GPT):
    """A GPT whose own forward returns zero logits."""

    def forward(self, *arguments, **keywords):
        return GPT.forward(self, *arguments, **keywords) * 0


class SilencedLinear(torch.nn.Linear):
    def forward(self, inputs):
        return super().forward(inputs) * 0


def _silenced_gpt() -> GPT:
    model = tiny_model()
    silenced = SilencedGPT(model.config).eval()
    silenced.load_state_dict(model.state_dict())
    return silenced


def _silenced_output_layer() -> GPT:
    model = tiny_model()
    W_o = model.blocks[0].attention.W_o
    silenced = SilencedLinear(W_o.in_features, W_o.out_features, bias=W_o.bias is not None)
    silenced.load_state_dict(W_o.state_dict())
    model.blocks[0].attention.W_o = silenced
    return model


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_silenced_gpt, "the model, a SilencedGPT, replaces GPT's forward: measure computes"),
        (
            _silenced_output_layer,
            "the model's blocks.0.attention.W_o is a SilencedLinear, where a GPT has a Linear",
        ),
    ],
    ids=["GPT subclass", "layer subclass"],
)
@pytest.mark.parametrize(
    "call",
    [
        lambda model: measure(model, repeated_sequences(3, 8, 16), 8),
        lambda model: placement_map(model, lengths=[2], rows=1),
    ],
    ids=["measure", "placement_map"],
)
def test_a_model_whose_own_code_the_float64_copy_would_not_run_is_refused(make, words, call):
    """A GPT subclass whose forward returned zero logits was measured as the plain GPT."""
    with pytest.raises(ValueError) as raised:
        call(make())
    assert words in str(raised.value), str(raised.value)


class GPTWithANote(GPT):
    """A GPT subclass that only adds a method and an attribute its own __init__ sets, as
    chapter 12's translator does."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        self.noted = "a GPT"

    def note(self) -> str:
        return self.noted


def test_a_subclass_that_only_adds_methods_is_measured_as_its_gpt():
    model = tiny_model()
    noted = GPTWithANote(model.config).eval()
    noted.load_state_dict(model.state_dict())
    ids = repeated_sequences(3, 8, 16)
    found, expected = measure(noted, ids, 8), measure(model, ids, 8)
    assert found.keys() == expected.keys()
    assert all(
        torch.equal(torch.as_tensor(found[k]), torch.as_tensor(v)) for k, v in expected.items()
    )


def test_a_forward_set_on_the_model_itself_is_refused():
    model = tiny_model()
    model.forward = lambda ids: GPT.forward(model, ids) * 0
    with pytest.raises(ValueError, match="replaces GPT's forward"):
        measure(model, repeated_sequences(3, 8, 16), 8)


def test_a_placement_map_refuses_a_model_with_hooks_its_float64_copy_would_not_run():
    model = tiny_model()
    model.blocks[0].register_forward_hook(lambda module, inputs, output: output)
    with pytest.raises(ValueError, match="has forward hooks"):
        placement_map(model, lengths=[2], rows=1)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {"num_heads": 4},
            "the model's blocks.0.attention has num_heads 2, where its config makes 4",
        ),
        (
            {"num_layers": 1},
            "the model has blocks.1, which a GPT of its config (num_layers=1) lacks",
        ),
        ({"d_model": 16}, "the model's tokens has embedding_dim 8, where its config makes 16"),
    ],
    ids=["num_heads", "num_layers", "d_model"],
)
def test_a_config_that_disagrees_with_the_models_modules_is_refused(change, words):
    """A config edited to 4 heads after building was measured as 4 heads of a 2-head model."""
    model = tiny_model()
    model.config = dataclasses.replace(model.config, **change)
    with pytest.raises(ValueError) as raised:
        measure(model, repeated_sequences(3, 8, 16), 8)
    assert words in str(raised.value), str(raised.value)


def test_a_placement_map_of_hours_of_work_is_refused_with_its_size():
    """Every length that fits in a context of 256, 64 rows each, ran for about an hour."""
    config = GPTConfig(
        vocab_size=256, context_length=256, d_model=8, num_heads=2, num_layers=1, d_ff=8,
        attention_only=True, position="rope",
    )  # fmt: skip
    lengths = range(2, 129)
    with pytest.raises(ValueError) as raised:
        placement_map(GPT(config), lengths, 64)
    placements = sum(config.context_length - 2 * length + 1 for length in lengths)
    assert f"would measure {placements:,} placements of 64 rows" in str(raised.value)
    assert "ask for fewer or shorter lengths" in str(raised.value)


def test_a_recipe_whose_training_step_would_hold_gigabytes_is_refused_before_training():
    """A context and vocabulary of 10,000 allocated about 4 GB in the first step (the forward
    size guard allows attention maps of 2e8 numbers, and the backward pass keeps several)."""
    recipe = Recipe(
        context_length=10000, vocab_size=10000, batch_size=1, eval_batch=1, d_model=8, steps=2,
        log_every=1, snapshot_every=1,
    )  # fmt: skip
    with pytest.raises(ValueError, match=r"a training step would allocate \d+ bytes at its peak"):
        train_model(1, recipe)


@pytest.mark.parametrize(
    ("rate", "words"),
    [
        (Decimal("0.001"), "got Decimal('0.001') (a Decimal)"),
        (torch.tensor(1e-3), "(a Tensor: tensor.item() gives its number)"),
    ],
    ids=["Decimal", "0-d tensor"],
)
def test_a_learning_rate_of_another_type_is_named_as_such(rate, words):
    """The message said "must be a finite number" of 0.001 (an eighth hostile pass)."""
    with pytest.raises(ValueError, match="learning_rate must be an int or a float") as raised:
        Recipe(learning_rate=rate)
    assert words in str(raised.value)


def test_the_loaded_models_are_float32_under_a_float64_default():
    """They followed the caller's default dtype (an eleventh hostile pass)."""
    from helpers.induction import load_position_models

    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        models = [*load_models().values(), *load_position_models().values()]
    finally:
        torch.set_default_dtype(default)
    assert all(model.tokens.weight.dtype == torch.float32 for model in models)
