"""Arguments are checked at the door, before any work: a path that cannot be saved to is named
before the minutes of training, not after them; a bad seed or pad_id before a model is copied
or run. Each test makes the work fail loudly, so that reaching it fails the test."""

import dataclasses

import pytest
import torch

from helpers import (
    bahdanau,
    dates,
    decoder_only,
    induction,
    long_context,
    training,
    transformer_translation,
    translation,
    vision,
    vision_models,
)
from helpers.checkpoints import CheckpointError
from helpers.gpt import GPT
from helpers.vision import check_pixels


def never(*arguments, **options):
    raise AssertionError("the work began before the arguments were checked")


@pytest.mark.parametrize(
    ("train_and_save", "trainer"),
    [
        (long_context.train_and_save_all, "train_recall_model"),
        (long_context.train_and_save_low_rank, "train_low_rank_model"),
    ],
)
def test_a_path_that_cannot_be_saved_is_named_before_training(
    tmp_path, monkeypatch, train_and_save, trainer
):
    monkeypatch.setattr(long_context, trainer, never)
    with pytest.raises(CheckpointError, match="does not exist"):
        train_and_save(tmp_path / "missing" / "models.pt")
    with pytest.raises(CheckpointError, match="checksum file's"):
        train_and_save(tmp_path / "models.pt.sha256")


@pytest.mark.parametrize(
    ("module", "name"), [(bahdanau, "rnn-bahdanau"), (transformer_translation, "transformer")]
)
def test_a_translator_path_that_cannot_be_saved_is_named_before_the_first_epoch(
    tmp_path, monkeypatch, module, name
):
    """A name ending in .sha256 was refused only when the first epoch's weights were saved."""
    monkeypatch.setattr(module, "load_tokenizer", never)
    monkeypatch.setattr(module, "train_translator", never)
    with pytest.raises(CheckpointError, match="checksum file's"):
        module.train_and_save(name, device="cpu", path=tmp_path / "model.pt.sha256")
    with pytest.raises(CheckpointError, match=r"the folder .* does not exist"):
        module.train_and_save(name, device="cpu", path=tmp_path / "missing" / "model.pt")


class Untouchable(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(self, *arguments):
        never()


@pytest.mark.parametrize(
    ("options", "message"),
    [({"pad_id": -1}, "pad_id must be a whole number >= 0"), ({"warmup": 1.5}, "warmup")],
)
def test_train_seq2seq_names_a_bad_pad_id_or_warmup_before_a_step(options, message):
    arguments = {"steps": 3, "lr": 1e-3, "warmup": 1, "pad_id": 0, **options}
    batch = (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=message):
        training.train_seq2seq(Untouchable(), lambda: batch, progress=False, **arguments)


def test_placement_map_names_a_bad_seed_before_copying_the_model(monkeypatch):
    monkeypatch.setattr(induction, "_float64_copy", never)
    config = induction.model_config(induction.Recipe(), 1)
    with pytest.raises(ValueError, match="seed"):
        induction.placement_map(GPT(config), lengths=[2], rows=2, seed=-1)


@pytest.mark.parametrize(
    ("recipe", "model"),
    [
        (vision_models.VitRecipe(batch_size=4), vision_models.VisionTransformer(8, 2, 1, 16)),
        (vision_models.FinderRecipe(batch_size=4), vision_models.DigitFinder(8, 1, 16)),
        (vision_models.ReaderRecipe(batch_size=4), vision_models.CanvasReader(8, 2, 1, 1, 16)),
    ],
    ids=["vit", "finder", "reader"],
)
def test_a_vision_training_step_checks_nothing_and_its_door_checks_once(monkeypatch, recipe, model):
    """A step of train read every training pixel (make_canvases), then the canvases twice more
    (the questions, the model); the loss a learner calls checks the digits once, then computes
    what the step computes."""
    digits = vision.load_digits()[0]
    door = vision_models.LOSSES[type(recipe)]
    expected = door(model, recipe, digits, torch.Generator().manual_seed(0))
    checks = {"pixels": 0}

    def counted(*arguments, **options):
        checks["pixels"] += 1
        return check_pixels(*arguments, **options)

    for module in (vision, vision_models):
        monkeypatch.setattr(module, "check_pixels", counted)
    step = vision_models._LOSS_CORES[type(recipe)]
    assert torch.equal(step(model, recipe, digits, torch.Generator().manual_seed(0)), expected)
    assert checks["pixels"] == 0
    door(model, recipe, digits, torch.Generator().manual_seed(0))
    assert checks["pixels"] == 1


def test_a_decoder_only_training_step_calls_no_door(monkeypatch):
    """Each batch went through build_sequences, training_loss and loss_targets, which checked
    the separator, the model, label_smoothing and every id again, and model.features, which
    checked them once more; the loop now calls what they compute."""
    pairs = list(translation._splits()["train"][:20])
    monkeypatch.setattr(decoder_only, "load_pairs", lambda split: pairs)
    monkeypatch.setattr(translation, "grouped_references", lambda split: (["Go."], [["Va !"]]))
    for door in ("build_sequences", "training_loss", "loss_targets", "learning_rate_factor"):
        monkeypatch.setattr(decoder_only, door, never, raising=False)
    monkeypatch.setattr(GPT, "features", never)
    tokenizer = decoder_only.load_tokenizer_with_separator()[0]
    recipe = dataclasses.replace(
        decoder_only.RECIPE, num_layers=1, d_model=16, d_ff=32, num_heads=2, epochs=1
    )
    model = decoder_only.build_translator(8001, 8000, recipe)
    history = decoder_only.train_decoder_only(model, tokenizer, recipe, log=lambda line: None)
    assert len(history["loss"]) == 1 and history["loss"][0] > 0


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "texts must be a non-empty list"),
        (["3 March 2015"] * 600 + ["  "], "the date is empty"),
    ],
)
def test_predict_names_bad_texts_before_decoding_any(monkeypatch, texts, message):
    """An empty list came back as [], and an empty date after 500 others had been decoded."""
    model = dates.new_date_model()
    monkeypatch.setattr(model, "greedy_decode", never)
    with pytest.raises(ValueError, match=message):
        dates.predict(model, texts)
