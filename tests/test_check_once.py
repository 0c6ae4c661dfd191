"""Arguments are checked at the door, before any work: a path that cannot be saved to is named
before the minutes of training, not after them; a bad seed or pad_id before a model is copied
or run. Each test makes the work fail loudly, so that reaching it fails the test."""

import pytest
import torch

from helpers import bahdanau, induction, long_context, training, transformer_translation
from helpers.checkpoints import CheckpointError
from helpers.gpt import GPT


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
