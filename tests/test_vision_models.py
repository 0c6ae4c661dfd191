"""helpers.vision_models: chapter 14's three models, their training, the saved file, and what
the shipped models do on test digits."""

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from helpers import validation, vision_models
from helpers.checkpoints import CheckpointError
from helpers.vision import Canvases, Digits, load_digits, make_canvases
from helpers.vision_models import (
    BOS,
    EOS,
    PAD,
    CanvasReader,
    DigitFinder,
    FinderRecipe,
    ReaderRecipe,
    VisionTransformer,
    VitRecipe,
    cell_masks,
    evaluate_finder,
    evaluate_reader,
    evaluate_vit,
    finder_questions,
    finder_test_set,
    load_vision_models,
    read_canvas,
    reader_sequences,
    reader_test_set,
    reading_order,
    row_entropy,
    same_cell_mask,
    train,
    train_and_save,
    train_finder,
    train_reader,
    train_vit,
    vit_attention_entropy,
)

TINY = {
    "vit": VitRecipe(d_model=8, num_heads=2, num_layers=1, d_ff=8, steps=3, batch_size=8),
    "finder": FinderRecipe(d_model=8, d_ff=8, steps=3, batch_size=8),
    "reader": ReaderRecipe(
        d_model=8, num_heads=2, encoder_layers=1, decoder_layers=1, d_ff=8, steps=3, batch_size=8
    ),
}
# Measured on the shipped file (1,000 test canvases each), less a margin: ViT 0.9805, reader exact
# match 0.948 and attention share 0.978. The finder's 0.9 is the bar (measured: 0.977 and
# 0.930).
VIT_ACCURACY = 0.95
READER_EXACT = 0.9
READER_SHARE = 0.9

for recipe in TINY.values():
    assert recipe.log_every > recipe.steps  # the log then holds the last step only


def tiny_vit():
    return VisionTransformer(d_model=8, num_heads=2, num_layers=2, d_ff=8)


def tiny_finder():
    return DigitFinder(d_model=8, encoder_layers=1, d_ff=8)


def tiny_reader():
    return CanvasReader(d_model=8, num_heads=2, encoder_layers=1, decoder_layers=2, d_ff=8)


@pytest.fixture(scope="module")
def digits():
    return load_digits()


@pytest.fixture(scope="module")
def canvases(digits):
    return make_canvases(digits[1], 6, 3, generator=torch.Generator().manual_seed(0))


# The models' shapes and attention


def test_vit_classifies_each_digit_and_keeps_the_class_tokens_attention(digits):
    model = tiny_vit()
    logits = model(digits[1].images[:5])
    assert logits.shape == (5, 10)
    for block in model.blocks:
        weights = block.self_attention.attention_weights
        assert weights.shape == (5, 2, 5, 5)  # the class token and 4 patches
        torch.testing.assert_close(weights.sum(-1), torch.ones(5, 2, 5))


def test_the_patch_positions_are_fixed_not_learned():
    model = tiny_vit()
    assert not any("positions" in name for name, _ in model.named_parameters())
    assert "embed.positions" not in model.state_dict()


def test_finder_points_one_query_at_the_patches(canvases):
    model = tiny_finder()
    words, _ = finder_questions(canvases)
    logits = model(canvases.images, words)
    assert logits.shape == (6, 9)
    weights = model.attention.attention_weights
    assert weights.shape == (6, 1, 1, 36)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 1, 1))


def test_the_finders_self_attention_stays_inside_each_cell(canvases):
    model = tiny_finder()
    model(canvases.images, finder_questions(canvases)[0])
    weights = model.blocks[0].self_attention.attention_weights  # (B, 1, 36, 36)
    outside = weights * ~same_cell_mask()
    assert outside.abs().max() == 0
    assert same_cell_mask().sum(1).eq(4).all()


def test_reader_writes_logits_for_every_position_and_keeps_cross_attention(canvases):
    model = tiny_reader()
    inputs, _ = reader_sequences(canvases)
    logits = model(canvases.images, inputs)
    assert logits.shape == (6, 10, 13)
    for block in model.decoder:
        weights = block.cross_attention.attention_weights
        assert weights.shape == (6, 2, 10, 36)
        torch.testing.assert_close(weights.sum(-1), torch.ones(6, 2, 10))


def test_reader_is_causal(canvases):
    model = tiny_reader()
    inputs, _ = reader_sequences(canvases)
    changed = inputs.clone()
    changed[:, 3:] = 5
    torch.testing.assert_close(
        model(canvases.images, inputs)[:, :3], model(canvases.images, changed)[:, :3]
    )


# The data the tasks ask about


def hand_made_canvas() -> Canvases:
    """A 3 x 3 canvas holding 7 in cell 5 and 2 in cell 1, and an empty one."""
    digits = torch.full((2, 9), -1)
    digits[0, 5], digits[0, 1] = 7, 2
    return Canvases(torch.zeros(2, 1, 24, 24), digits, 3)


def test_reading_order_lists_the_filled_cells_row_by_row():
    cells, counts = reading_order(hand_made_canvas())
    assert counts.tolist() == [2, 0]
    assert cells[0, :2].tolist() == [1, 5]


def test_reader_sequences_put_bos_first_and_eos_after_the_digits():
    inputs, targets = reader_sequences(hand_made_canvas())
    assert inputs[0].tolist() == [BOS, 2, 7] + [PAD] * 7
    assert targets[0].tolist() == [2, 7, EOS] + [PAD] * 7
    assert inputs[1].tolist() == [BOS] + [PAD] * 9
    assert targets[1].tolist() == [EOS] + [PAD] * 9


def test_finder_questions_name_a_digit_of_the_canvas_and_its_cell(canvases):
    words, cells = finder_questions(canvases, torch.Generator().manual_seed(1))
    assert (canvases.digits.gather(1, cells[:, None])[:, 0] == words).all()


def test_cell_masks_mark_the_four_patches_of_each_cell():
    masks = cell_masks()
    assert masks.shape == (9, 36)
    assert masks.sum(1).eq(4).all() and masks.sum(0).eq(1).all()
    assert masks[4].nonzero().flatten().tolist() == [14, 15, 20, 21]


def test_read_canvas_pads_after_eos(canvases):
    tokens = read_canvas(tiny_reader(), canvases.images)
    assert tokens.shape == (6, 10)
    for row in tokens.tolist():
        if EOS in row:
            assert set(row[row.index(EOS) + 1 :]) <= {PAD}


# Measurements


def test_row_entropy_of_a_uniform_row_is_ln_of_the_keys():
    assert row_entropy(torch.full((3, 5), 0.2)).tolist() == pytest.approx([math.log(5)] * 3)
    assert row_entropy(torch.tensor([[1.0, 0.0, 0.0]])).item() == 0


def test_vit_attention_entropy_is_per_layer_and_head_and_at_most_uniform(digits):
    found = vit_attention_entropy(tiny_vit(), digits[1].images[:20])
    assert found["entropy"].shape == (2, 2) and found["entropy"].dtype == torch.float64
    assert found["uniform"] == pytest.approx(math.log(5))
    assert (found["entropy"] <= found["uniform"] + 1e-12).all()


def test_evaluations_are_shares(digits, canvases):
    assert 0 <= evaluate_vit(tiny_vit(), digits[1])["accuracy"] <= 1
    found = evaluate_finder(tiny_finder(), canvases, *finder_questions(canvases))
    assert 0 <= found["accuracy"] <= 1 and 0 <= found["attention_on_cell"] <= 1
    read = evaluate_reader(tiny_reader(), canvases)
    assert 0 <= read["exact_match"] <= 1 and 0 <= read["attention_share"] <= 1


def test_a_perfect_reader_attention_scores_one(monkeypatch):
    """evaluate_reader's share, checked on weights put exactly on each digit's cell (by a hook
    on the model itself, not the float64 copy it evaluates)."""
    monkeypatch.setattr(vision_models, "_float64_copy", lambda model: model.double().eval())
    canvases = hand_made_canvas()
    model = tiny_reader()
    masks = cell_masks()

    def on_the_right_cells(module, inputs, output):
        weights = torch.zeros(2, 2, 10, 36, dtype=torch.float64)
        weights[0, :, 0], weights[0, :, 1] = masks[1] / 4, masks[5] / 4
        module.attention.attention_weights = weights

    model.decoder[-1].cross_attention.register_forward_hook(on_the_right_cells)
    assert evaluate_reader(model, canvases)["attention_share"] == 1.0


def test_the_test_sets_are_the_same_on_every_call():
    first, second = finder_test_set(20), finder_test_set(20)
    for a, b in zip(first[1:], second[1:], strict=True):
        assert torch.equal(a, b)
    assert torch.equal(first[0].images, second[0].images)
    assert torch.equal(reader_test_set(20).digits, reader_test_set(20).digits)


# Training and the saved file


@pytest.mark.parametrize(
    "trainer, name", [(train_vit, "vit"), (train_finder, "finder"), (train_reader, "reader")]
)
def test_training_twice_gives_identical_weights(trainer, name):
    first, second = trainer(TINY[name]), trainer(TINY[name])
    for key, value in first["model"].state_dict().items():
        assert torch.equal(value, second["model"].state_dict()[key]), key
    assert first["log"]["step"] == [3] and first["log"] == second["log"]
    assert not first["model"].training


def test_training_leaves_the_callers_random_numbers_and_threads_alone():
    threads = torch.get_num_threads()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    train_vit(TINY["vit"])
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads


TRAINERS = {"vit": train_vit, "finder": train_finder, "reader": train_reader}


def _same_weights(first: torch.nn.Module, second: torch.nn.Module) -> bool:
    theirs = second.state_dict()
    return all(torch.equal(value, theirs[key]) for key, value in first.state_dict().items())


@pytest.mark.parametrize("switch_off", [torch.no_grad, torch.inference_mode], ids=str)
@pytest.mark.parametrize("name", TRAINERS)
def test_training_turns_gradients_on_inside_no_grad_and_inference_mode(name, switch_off):
    expected = TRAINERS[name](TINY[name])["model"]
    with switch_off():  # it crashed: "element 0 of tensors does not require grad"
        trained = TRAINERS[name](TINY[name])["model"]
        assert not torch.is_grad_enabled()
    assert _same_weights(trained, expected)
    assert not any(weight.is_inference() for weight in trained.parameters())


@pytest.mark.parametrize("name", TRAINERS)
def test_training_builds_float32_models_whatever_the_default_dtype(name):
    expected = TRAINERS[name](TINY[name])["model"]
    torch.set_default_dtype(torch.float64)
    try:  # it was refused: "convert them with images.to(...)", which the caller cannot do
        trained = TRAINERS[name](TINY[name])["model"]
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert _same_weights(trained, expected)


def test_the_test_sets_are_the_same_float32_canvases_whatever_the_default_dtype():
    """Under a float64 default, make_canvases built float64 canvases the models refused."""
    expected = (*finder_test_set(20), reader_test_set(20))
    torch.set_default_dtype(torch.float64)
    try:
        built = (*finder_test_set(20), reader_test_set(20))
    finally:
        torch.set_default_dtype(torch.float32)
    canvases, words, cells, read = built
    assert canvases.images.dtype == read.images.dtype == torch.float32
    for got, want in zip((canvases, read), (expected[0], expected[3]), strict=True):
        assert torch.equal(got.images, want.images) and torch.equal(got.digits, want.digits)
    assert torch.equal(words, expected[1]) and torch.equal(cells, expected[2])


@pytest.mark.parametrize("kind", [VitRecipe, FinderRecipe, ReaderRecipe])
@pytest.mark.parametrize(
    ("rates", "words"),
    [
        ({"learning_rate": 1e39}, r"learning_rate must be at most 1, got 1e\+39: AdamW moves"),
        ({"learning_rate": 1.5}, "learning_rate must be at most 1, got 1.5"),
        ({"weight_decay": 1e39}, r"weight_decay must be at most 1 / learning_rate = 333\.333"),
        ({"learning_rate": 0.5, "weight_decay": 2.5}, r"at most 1 / learning_rate = 2, got 2\.5"),
    ],
    ids=["lr 1e39", "lr 1.5", "decay 1e39", "decay x lr 1.25"],
)
def test_a_learning_rate_or_weight_decay_adamw_cannot_train_with_is_refused(kind, rates, words):
    with pytest.raises(ValueError, match=words):  # 1e39 overflowed inside AdamW; a decay of
        kind(**rates)  # 1e39 trained until the loss was NaN and blamed the learning rate


def test_the_largest_learning_rate_and_weight_decay_are_taken():
    recipe = VitRecipe(learning_rate=validation.MOST_LEARNING_RATE, weight_decay=1.0)
    assert (recipe.learning_rate, recipe.weight_decay) == (1.0, 1.0)


class _Exploding(torch.optim.SGD):
    """An optimizer whose one step makes every weight about 1e30: a divergence."""

    def __init__(self, params, lr, weight_decay):
        super().__init__(params, lr=1e30)


@pytest.mark.parametrize("name", TRAINERS)
def test_a_divergence_in_the_last_step_is_caught(monkeypatch, name):
    monkeypatch.setattr(torch.optim, "AdamW", _Exploding)
    one_step = dataclasses.replace(TINY[name], steps=1)  # the log holds a finite loss
    with pytest.raises(ValueError, match=r"diverged in its last step \(1\): .* learning rate"):
        TRAINERS[name](one_step)


def test_the_reader_diverging_mid_training_is_named_a_divergence(monkeypatch):
    monkeypatch.setattr(torch.optim, "AdamW", _Exploding)
    two_steps = dataclasses.replace(TINY["reader"], steps=2)  # step 2's logits overflow
    with pytest.raises(ValueError, match=r"diverged at step 2: .* learning rate 0\.003"):
        train_reader(two_steps)


def test_save_and_load_round_trip(tmp_path):
    path = tmp_path / "vision.pt"
    seconds = train_and_save(path, TINY)
    assert set(seconds) == {"vit", "finder", "reader"}
    loaded = load_vision_models(path)
    assert loaded["recipes"] == TINY
    assert isinstance(loaded["vit"], VisionTransformer) and not loaded["vit"].training
    assert isinstance(loaded["finder"], DigitFinder) and isinstance(loaded["reader"], CanvasReader)
    assert loaded["logs"]["reader"]["step"] == [3]
    (tmp_path / "again").mkdir()
    again = tmp_path / "again" / "vision.pt"  # torch writes the name into the file
    train_and_save(again, TINY)
    assert again.read_bytes() == path.read_bytes()  # no timings in the file


def test_a_damaged_file_is_refused(tmp_path):
    path = tmp_path / "vision.pt"
    train_and_save(path, TINY)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="damaged"):
        load_vision_models(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_vision_models(tmp_path / "missing.pt")


# Bad input, refused by name


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: tiny_vit()(torch.zeros(2, 1, 24, 24)), r"images must be \(B, 1, 8, 8\)"),
        (lambda: tiny_vit()(torch.zeros(2, 1, 8, 8).numpy()), "numpy"),
        (lambda: tiny_vit()(torch.zeros(2, 1, 8, 8, dtype=torch.float64)), "float64"),
        (lambda: tiny_finder()(torch.zeros(2, 1, 24, 24), torch.tensor([1, 10])), "outside"),
        (lambda: tiny_finder()(torch.zeros(2, 1, 24, 24), torch.tensor([1])), "one id per"),
        (lambda: tiny_finder()(torch.zeros(2, 1, 24, 24), torch.tensor([1.0, 2.0])), "integer"),
        (lambda: tiny_reader()(torch.zeros(2, 1, 24, 24), torch.full((2, 11), BOS)), "T <= 10"),
        (lambda: tiny_reader()(torch.zeros(2, 1, 24, 24), torch.full((2, 3), 13)), "outside"),
        (lambda: VisionTransformer(10, 2, 1, 8), "multiple of 4"),
        (lambda: VisionTransformer(12, 8, 1, 8), "divisible by num_heads"),
        (lambda: CanvasReader(8, 2, 0, 1, 8), "encoder_layers"),
        (lambda: VitRecipe(steps=0), "steps"),
        (lambda: VitRecipe(learning_rate=-1.0), "learning_rate"),
        (lambda: VitRecipe(d_model=6), "multiple of 4"),
        (lambda: FinderRecipe(d_ff=2.0), "d_ff"),
        (lambda: ReaderRecipe(fewest=3, most=2), "fewest"),
        (lambda: ReaderRecipe(most=10), "fewest"),
        (lambda: evaluate_reader(tiny_reader(), hand_made_canvas(), layer=2), "layer"),
        (lambda: evaluate_reader(tiny_reader(), hand_made_canvas(), layer=True), "layer"),
        (
            lambda: evaluate_finder(
                tiny_finder(), hand_made_canvas(), torch.tensor([2, 2]), torch.tensor([1, 9])
            ),
            "cells must be cell indices 0..8, got 1..9",
        ),
        (lambda: vit_attention_entropy(tiny_vit(), torch.zeros(2, 8, 8)), r"\(B, 1, 8, 8\)"),
        (
            lambda: vit_attention_entropy(tiny_vit(), torch.zeros(2, 1, 8, 8, dtype=torch.long)),
            "floating",
        ),
        (lambda: finder_questions(hand_made_canvas()), "every canvas must hold a digit"),
        (lambda: finder_test_set(0), "count"),
        (lambda: train_and_save("/no/such/folder/x.pt", TINY), "does not exist"),
        (lambda: train_and_save(".", TINY), "folder"),
        (lambda: train_and_save("x.pt", {"vit": TINY["vit"]}), "keys"),
        (lambda: train_vit(progress="yes"), "progress"),
    ],
)
def test_bad_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: train_vit(TINY["finder"]), "VitRecipe"),
        (lambda: train({"steps": 3}), "VitRecipe, FinderRecipe or ReaderRecipe"),
        (lambda: evaluate_vit(tiny_finder(), load_digits()[1]), "VisionTransformer"),
        (lambda: evaluate_vit(tiny_vit(), torch.zeros(2, 1, 8, 8)), "Digits"),
        (lambda: evaluate_reader(tiny_reader(), torch.zeros(2, 1, 24, 24)), "Canvases"),
        (lambda: reading_order([1, 2]), "Canvases"),
        (lambda: finder_questions(hand_made_canvas(), generator=3), "generator"),
        (lambda: read_canvas(tiny_vit(), torch.zeros(1, 1, 24, 24)), "CanvasReader"),
        (lambda: train_and_save(3, TINY), "file path"),
        (lambda: train_and_save("x.pt", {**TINY, "vit": TINY["reader"]}), "VitRecipe"),
    ],
)
def test_the_wrong_kind_of_object_is_refused_by_name(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_repeated_labels_are_refused_by_the_finder():
    canvas = hand_made_canvas()
    digits = canvas.digits.clone()
    digits[:, 0] = digits[:, 1] = 3
    with pytest.raises(ValueError, match="distinct"):
        finder_questions(Canvases(canvas.images, digits, 3))


# The shipped models, on test digits only


@pytest.fixture(scope="module")
def shipped():
    return load_vision_models()


def test_the_shipped_vit_names_the_test_digits(shipped, digits):
    assert evaluate_vit(shipped["vit"], digits[1])["accuracy"] >= VIT_ACCURACY


def test_the_shipped_vits_attention_is_measured_against_uniform(shipped, digits):
    found = vit_attention_entropy(shipped["vit"], digits[1].images)
    assert (found["entropy"] < found["uniform"]).all()


def test_the_shipped_finder_finds_the_digit_and_looks_at_it(shipped):
    found = evaluate_finder(shipped["finder"], *finder_test_set())
    assert found["accuracy"] >= 0.9
    assert found["attention_on_cell"] >= 0.9


def test_the_shipped_reader_reads_the_canvas_and_looks_at_each_digit(shipped):
    found = evaluate_reader(shipped["reader"], reader_test_set())
    assert found["exact_match"] >= READER_EXACT
    assert found["attention_share"] >= READER_SHARE


# Hostile input (issue 24's review): each refused early, by name, never NaN


def _non_finite_images(size: int) -> list[torch.Tensor]:
    return [torch.full((2, 1, size, size), value) for value in (float("nan"), float("inf"))]


@pytest.mark.parametrize("bad", [0, 1], ids=["NaN", "inf"])
@pytest.mark.parametrize(
    "call",
    [
        lambda images: tiny_vit()(images[:, :, :8, :8]),
        lambda images: vit_attention_entropy(tiny_vit(), images[:, :, :8, :8]),
        lambda images: tiny_finder()(images, torch.tensor([1, 2])),
        lambda images: tiny_reader()(images, torch.full((2, 1), BOS)),
        lambda images: read_canvas(tiny_reader(), images),
        lambda images: vision_models.PatchEmbedding(8, 24)(images),
    ],
    ids=["vit", "entropy", "finder", "reader", "read_canvas", "patch embedding"],
)
def test_images_that_are_not_finite_are_refused_not_answered_with_nan(call, bad):
    with pytest.raises(ValueError, match="NaN or inf"):
        call(_non_finite_images(24)[bad])


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: vision_models.PatchEmbedding(8, 10), r"image_size \(10\) must be a multiple"),
        (lambda: vision_models.PatchEmbedding(8, "24"), "image_size must be a whole number"),
        (lambda: vision_models.PatchEmbedding(8, 8)(torch.zeros(2, 1, 24, 24)), r"\(B, 1, 8, 8\)"),
        (lambda: vision_models.PatchEmbedding(8, 8)(torch.zeros(2, 3, 8, 8)), r"\(B, 1, 8, 8\)"),
        (lambda: vision_models.PatchEmbedding(8, 8)(torch.zeros(2, 1, 8, 8).double()), "float64"),
        (lambda: row_entropy(torch.tensor([[-0.5, 1.5]])), "each in 0..1"),
        (lambda: row_entropy(torch.tensor([[float("nan"), 0.5]])), "weights hold NaN"),
        (lambda: row_entropy(torch.tensor(0.5)), r"attention weights \(..., k\), got"),
        (lambda: row_entropy(torch.full((1, 2), 0.5).to(torch.complex64)), "complex64"),
        (lambda: row_entropy([[0.5, 0.5]]), "torch.Tensor"),
        (lambda: vit_attention_entropy(tiny_vit(), torch.zeros(0, 1, 8, 8)), "at least one"),
        (
            lambda: evaluate_vit(
                tiny_vit(), Digits(torch.zeros(0, 1, 8, 8), torch.zeros(0).long())
            ),
            "at least one",
        ),  # fmt: skip
        (
            lambda: evaluate_vit(
                tiny_vit(), Digits(torch.zeros(4, 1, 8, 8), torch.zeros(1).long())
            ),
            r"labels must be a tensor \(4,\)",
        ),  # fmt: skip
        (
            lambda: evaluate_vit(
                tiny_vit(), Digits(torch.zeros(4, 1, 8, 8), torch.zeros(4, 1).long())
            ),
            r"labels must be a tensor \(4,\)",
        ),  # fmt: skip
        (
            lambda: evaluate_vit(tiny_vit(), Digits(torch.zeros(4, 1, 8, 8), torch.full((4,), 10))),
            r"0..9, got 10..10",
        ),  # fmt: skip
        (
            lambda: evaluate_vit(
                tiny_vit(), Digits(torch.zeros(4, 1, 8, 8).long(), torch.zeros(4).long())
            ),
            "int64",
        ),  # fmt: skip
        (
            lambda: finder_questions(Canvases(torch.zeros(2, 1, 24, 24), torch.zeros(9).long(), 3)),
            r"digits must be a tensor \(B, 9\)",
        ),  # fmt: skip
        (
            lambda: reading_order(Canvases(torch.zeros(2, 1, 24, 24), torch.full((2, 9), 10), 3)),
            r"-1..9",
        ),  # fmt: skip
        (
            lambda: reader_sequences(
                Canvases(torch.zeros(2, 1, 24, 24), torch.zeros(2, 8).long(), 3)
            ),
            r"\(B, 9\)",
        ),  # fmt: skip
        (
            lambda: evaluate_reader(
                tiny_reader(), Canvases(torch.zeros(1, 1, 24, 24), torch.full((1, 9), -1), 3)
            ),
            "at least one digit",
        ),  # fmt: skip
        (
            lambda: evaluate_reader(
                tiny_reader(), Canvases(torch.zeros(0, 1, 24, 24), torch.zeros(0, 9).long(), 3)
            ),
            "at least one canvas",
        ),  # fmt: skip
        (
            lambda: evaluate_reader(
                tiny_reader(),
                Canvases(torch.zeros(2, 1, 24, 24).numpy(), hand_made_canvas().digits, 3),
            ),
            "tensor",
        ),  # fmt: skip
        (
            lambda: evaluate_finder(
                tiny_finder(), hand_made_canvas(), torch.tensor([7, 2]), torch.tensor([1, 1])
            ),
            "cells must hold the words' digits",
        ),  # fmt: skip
        (
            lambda: tiny_reader().decode(
                torch.full((2, 1), BOS), torch.full((2, 36, 8), float("nan"))
            ),
            "memory holds NaN",
        ),  # fmt: skip
        (
            lambda: tiny_reader().decode(torch.full((2, 1), BOS), torch.zeros(2, 36, 6)),
            r"memory must be \(B, n, 8\)",
        ),  # fmt: skip
        (
            lambda: tiny_reader().decode(torch.full((2, 1), BOS), torch.zeros(2, 36, 8).double()),
            "float64",
        ),  # fmt: skip
        (lambda: ReaderRecipe(encoder_layers=0), "encoder_layers must be a whole number >= 1"),
        (lambda: VitRecipe(d_model=2**31 - 4, num_heads=1), r"more than 2\^26"),
        (lambda: VitRecipe(num_layers=2**30), "at most 64 blocks"),
        (lambda: FinderRecipe(d_ff=2**31 - 1), r"more than 2\^26"),
        (lambda: VisionTransformer(8, 2, 10**12, 8), "at most 64 blocks"),
        (lambda: VisionTransformer(2**40, 2, 1, 8), r"more than 2\^26"),
        (lambda: CanvasReader(8, 2, 1, 1, 8, 10**5), "grid must be at most 32"),
        (lambda: DigitFinder(8, 1, 8, 33), "grid must be at most 32"),
        (lambda: vision_models.cell_masks(10**6), "grid must be at most 32"),
    ],
    ids=lambda value: "" if callable(value) else str(value)[:40],
)
def test_hostile_input_is_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("layer", [0, -1, torch.tensor(0), np.int64(-1)], ids=str)
def test_a_layer_may_be_any_whole_number_in_range(layer):
    canvases = Canvases(torch.rand(1, 1, 24, 24), hand_made_canvas().digits[:1], 3)
    one_layer = CanvasReader(d_model=8, num_heads=2, encoder_layers=1, decoder_layers=1, d_ff=8)
    assert set(evaluate_reader(one_layer, canvases, layer)) == {"exact_match", "attention_share"}


@pytest.mark.parametrize("grid", [1, 2, 3, 4])
def test_same_cell_mask_is_true_exactly_within_a_cell(grid):
    masks = cell_masks(grid)  # (cells, patches)
    torch.testing.assert_close(same_cell_mask(grid), (masks.T @ masks) > 0, rtol=0, atol=0)


def test_same_cell_mask_of_the_largest_grid_is_built_without_a_cube():
    assert same_cell_mask(32).shape == (4096, 4096)  # (cells, patches, patches): 17 GB


def test_models_after_a_training_step_are_evaluated_in_eval_mode_and_left_alone(canvases):
    finder = tiny_finder().train()
    words, cells = finder_questions(canvases, torch.Generator().manual_seed(0))
    finder(canvases.images, words).sum().backward()  # its attention weights now need grad
    before = {key: value.clone() for key, value in finder.state_dict().items()}
    assert 0 <= evaluate_finder(finder, canvases, words, cells)["accuracy"] <= 1
    assert finder.training
    for key, value in finder.state_dict().items():
        assert torch.equal(value, before[key])


def test_a_saved_recipe_too_large_to_build_is_a_checkpoint_error(tmp_path):
    from helpers.checkpoints import save_checkpoint

    contents = torch.load(vision_models.SAVED_MODELS, weights_only=True)
    contents["recipes"]["vit"]["d_ff"] = 2**30
    save_checkpoint(tmp_path / "huge.pt", contents)
    with pytest.raises(CheckpointError, match=r"recipe is not a valid one .*more than 2\^26"):
        load_vision_models(tmp_path / "huge.pt")


def test_a_saved_file_with_a_key_no_save_writes_is_refused_naming_it(tmp_path):
    """Keys below the top level were refused; one beside recipes, weights and logs was not."""
    from helpers.checkpoints import save_checkpoint

    contents = torch.load(vision_models.SAVED_MODELS, weights_only=True)
    save_checkpoint(tmp_path / "extra.pt", {**contents, "notes": "hand-added"})
    with pytest.raises(CheckpointError, match=r"alone, found also \['notes'\]"):
        load_vision_models(tmp_path / "extra.pt")


def test_loaded_models_are_float32_and_trainable_whatever_the_caller_set():
    """Under torch.set_default_dtype(torch.bfloat16) the models were built in bfloat16, their
    weights rounded; loaded inside torch.inference_mode() they could not be trained."""
    saved = torch.load(vision_models.SAVED_MODELS, weights_only=True)["weights"]
    caller = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        models = load_vision_models()
        assert torch.get_default_dtype() == torch.bfloat16  # the caller's setting, put back
    finally:
        torch.set_default_dtype(caller)
    for name in vision_models.MODELS:
        for key, weight in models[name].state_dict().items():
            assert weight.dtype == torch.float32, (name, key)
            if key in saved[name]:
                assert torch.equal(weight, saved[name][key].float()), (name, key)
    with torch.inference_mode():
        models = load_vision_models()
    train_digits = load_digits()[0]
    logits = models["vit"](train_digits.images[:4])
    torch.nn.functional.cross_entropy(logits, train_digits.labels[:4]).backward()
    assert models["vit"].head.weight.grad is not None


# Buffers state_dict leaves out (positions, local): an edit by hand reaches the float64 copy the
# evaluations measure (they were rebuilt fresh, and the evaluation scored another model)

EDITED_BUFFERS = {
    "vit": lambda model: model.embed.positions.zero_(),
    "finder": lambda model: model.local.fill_(True),
    "reader": lambda model: model.positions.zero_(),
}
EVALUATIONS = {
    "vit": lambda model, digits: evaluate_vit(model, digits[1]),
    "vit_entropy": lambda model, digits: vit_attention_entropy(model, digits[1].images[:200]),
    "finder": lambda model, digits: evaluate_finder(model, *finder_test_set(200)),
    "reader": lambda model, digits: evaluate_reader(model, reader_test_set(100)),
}


@pytest.mark.parametrize("evaluation", EVALUATIONS)
def test_an_edited_buffer_is_evaluated_as_the_model_holds_it(
    shipped, digits, evaluation, monkeypatch
):
    name = evaluation.split("_")[0]
    edited = copy.deepcopy(shipped[name])
    EDITED_BUFFERS[name](edited)
    found = EVALUATIONS[evaluation](edited, digits)
    as_the_model_computes = lambda model: copy.deepcopy(model).double().eval()  # noqa: E731
    monkeypatch.setattr(vision_models, "_float64_copy", as_the_model_computes)
    assert _same_results(found, EVALUATIONS[evaluation](edited, digits))
    assert not _same_results(found, EVALUATIONS[evaluation](shipped[name], digits))  # it tells


def _same_results(found: dict, expected: dict) -> bool:
    return found.keys() == expected.keys() and all(
        torch.equal(torch.as_tensor(value), torch.as_tensor(expected[key]))
        for key, value in found.items()
    )


def test_a_buffer_that_is_not_finite_or_not_the_one_built_is_refused_by_name(digits):
    model = tiny_vit()
    model.embed.positions[0, 0] = math.nan
    with pytest.raises(ValueError, match=r"NaN or inf in embed\.positions"):
        evaluate_vit(model, digits[1])
    model = tiny_vit()
    model.embed.positions = torch.zeros(3, 8)
    with pytest.raises(
        ValueError, match=r"buffer embed\.positions is a torch\.float32 tensor of shape \(3, 8\)"
    ):
        evaluate_vit(model, digits[1])
    finder = tiny_finder()
    finder.local = finder.local.long()
    with pytest.raises(ValueError, match=r"buffer local is a torch\.int64 tensor .* torch\.bool"):
        evaluate_finder(finder, *finder_test_set(4))


@pytest.mark.parametrize(
    ("model", "held"), [(None, "None"), (torch.nn.ReLU(), "ReLU"), ("vit", "'vit'")]
)
def test_largest_weight_names_a_model_without_weights(model, held):
    """None raised AttributeError and a ReLU max()'s empty sequence (a hostile pass)."""
    with pytest.raises(TypeError, match=f"expected a model with weights .*, got {held}"):
        vision_models.largest_weight(model)


def test_finite_logits_refuses_logits_that_are_not_a_floating_tensor():
    """A list raised AttributeError (a hostile pass)."""
    with pytest.raises(
        ValueError, match="logits must be a torch.Tensor of floating point, got list"
    ):
        vision_models.finite_logits([1.0], tiny_vit())
    with pytest.raises(TypeError, match="logits must be a floating point tensor, got torch.int64"):
        vision_models.finite_logits(torch.tensor([1]), tiny_vit())


def test_finite_logits_blames_the_logits_not_weights_of_ordinary_size():
    """NaN logits from a model of weights near 1 were said to come from its weights being too
    large (a hostile pass)."""
    with pytest.raises(
        vision_models.Overflow, match=r"the logits are not finite \(1 of 2 .*not too"
    ):
        vision_models.finite_logits(torch.tensor([float("nan"), 0.0]), tiny_vit())
    nan_weight = tiny_vit()
    with torch.no_grad():
        nan_weight.head.bias[0] = float("nan")
    with pytest.raises(vision_models.Overflow, match="up to nan, in head.bias.* are too large"):
        vision_models.finite_logits(torch.tensor([float("nan")]), nan_weight)


@pytest.mark.parametrize(("name", "scale"), [("vit", 1e8), ("finder", 1e30)])
def test_finite_weights_large_enough_to_overflow_are_named_not_returned_as_nan(name, scale):
    """The ViT and the finder returned NaN logits without a word where the reader raised its
    Overflow (a twelfth hostile pass)."""
    model = copy.deepcopy(vision_models.load_vision_models()[name])
    with torch.no_grad():
        for weight in model.parameters():
            weight.mul_(scale)
    if name == "vit":
        call = lambda: model(load_digits()[1].images[:2])  # noqa: E731
    else:
        canvases, words, _ = vision_models.finder_test_set(2)
        call = lambda: model(canvases.images, words)  # noqa: E731
    with pytest.raises(vision_models.Overflow, match="the logits overflow to inf or NaN"):
        call()
