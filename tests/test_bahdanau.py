"""Chapter 08's RNN translators refuse what they cannot translate: a bad configuration, ids
that are not a right-padded batch of sentences, a crafted checkpoint, a model of the wrong kind."""

import numpy as np
import pytest
import torch

from helpers import bahdanau, translation
from helpers.checkpoints import CheckpointError, save_checkpoint


@pytest.fixture(scope="module")
def model():
    return bahdanau.load_translator("rnn-bahdanau")[0]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"vocab_size": 0}, "vocab_size must be a whole number >= 4, got 0"),
        ({"vocab_size": 2.5}, "vocab_size must be a whole number"),
        ({"vocab_size": 100, "embed_size": 0}, "embed_size must be a whole number >= 1"),
        ({"vocab_size": 100, "hidden_size": "256"}, "hidden_size must be a whole number"),
        ({"vocab_size": 100, "dropout": 2}, r"dropout must be a probability in \[0, 1\)"),
        ({"vocab_size": 100, "attention": "False"}, "attention must be True or False"),
        ({"vocab_size": 100, "attention": 1}, "attention must be True or False"),
    ],
)
def test_a_bad_config_is_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        bahdanau.RNNConfig(**settings)


def test_numpy_sizes_and_flags_are_accepted():
    config = bahdanau.RNNConfig(np.int64(100), attention=np.bool_(False))
    assert config.vocab_size == 100 and type(config.vocab_size) is int
    assert config.attention is False
    with pytest.raises(TypeError, match="config must be an RNNConfig, got dict"):
        bahdanau.RNNTranslator({"vocab_size": 100})


TWO = torch.tensor([[300, 301, 2], [302, 2, 0]])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (TWO.float(), "source must hold integer token ids, got torch.float32"),
        (torch.tensor([[8000, 2]]), "outside the vocabulary 0..7999"),
        (torch.tensor([[-1, 2]]), "outside the vocabulary"),
        (TWO[0], r"source must be \(B, S\), got shape \(3,\)"),
        (torch.tensor([[300, 2], [0, 0]]), "source row 1 holds only <pad>"),
        (torch.zeros(0, 3, dtype=torch.long), r"source holds no tokens: shape \(0, 3\)"),
        (torch.zeros(1, 0, dtype=torch.long), r"source holds no tokens: shape \(1, 0\)"),
        (torch.tensor([[0, 0, 300, 2]]), "row 0 has a <pad> before a token.*right padding"),
        (torch.tensor([[300, 0, 301, 2]]), "row 0 has a <pad> before a token"),
        (np.array([[300, 2]]), "torch.from_numpy"),
    ],
)
def test_a_source_that_is_not_a_right_padded_batch_is_refused(model, source, message):
    with pytest.raises(ValueError, match=message):
        model.translate_ids(source)
    with pytest.raises(ValueError, match=message):
        model(source, torch.ones(2, 2, dtype=torch.long))


@pytest.mark.parametrize("max_len", [0, -1, 2.5, True])
def test_max_len_must_be_a_positive_whole_number(model, max_len):
    with pytest.raises(ValueError, match="max_len must be a whole number >= 1"):
        model.translate_ids(TWO, max_len=max_len)


def test_max_len_is_honoured_down_to_one_step(model):
    assert model.translate_ids(TWO, max_len=1).shape == (2, 1)


@pytest.mark.parametrize("previous", [torch.full((2,), 8000), torch.full((2,), -1)])
def test_a_decoding_step_refuses_ids_outside_the_vocabulary(model, previous):
    with pytest.raises(ValueError, match="previous holds ids from .* outside the vocabulary"):
        model.decode_step(model.encode(TWO), previous)


def test_teacher_forcing_refuses_a_target_of_another_batch(model):
    with pytest.raises(ValueError, match=r"target_in must be \(B, T\) with T >= 1"):
        model(TWO, torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="target_in must hold integer token ids"):
        model(TWO, torch.ones(2, 2))


def crafted(tmp_path, change):
    """A copy of rnn-bahdanau.pt changed by change(contents), with a valid checksum."""
    contents = torch.load(
        bahdanau.model_path("rnn-bahdanau"), map_location="cpu", weights_only=True
    )
    change(contents)
    path = tmp_path / "crafted.pt"
    save_checkpoint(path, contents)
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["config"].update(vocab_size=0), "vocab_size must be a whole number >= 4"),
        (lambda c: c["config"].update(dropout=2), "dropout must be a probability"),
        (lambda c: c["config"].update(attention="True"), "attention must be True or False"),
        (lambda c: c["config"].update(hidden_size=100_000), "more than a checkpoint"),
        (
            lambda c: c.update(weights={k: v.long() for k, v in c["weights"].items()}),
            "should be a floating-point tensor, found torch.int64",
        ),
        (lambda c: c["weights"].pop("output_bias"), "missing: output_bias"),
        (lambda c: c.update(history=[1]), "history should be a dict"),
    ],
)
def test_a_crafted_checkpoint_is_a_checkpoint_error(tmp_path, change, message):
    with pytest.raises(CheckpointError, match=message):
        bahdanau.load_translator("rnn-bahdanau", crafted(tmp_path, change))


def test_translate_with_alignment_names_the_model_class_it_needs():
    not_a_translator = torch.nn.Linear(1, 1)
    with pytest.raises(TypeError, match="model must be an RNNTranslator, got Linear"):
        bahdanau.translate_with_alignment(not_a_translator, translation.load_tokenizer(), "Hi.")


def test_a_lone_surrogate_is_named_in_the_learners_words():
    with pytest.raises(ValueError, match="not valid text .*lone surrogate U\\+D800"):
        translation.sentence_ids(translation.load_tokenizer(), "I see\ud800.")


@pytest.mark.parametrize("tokens", ["▁abc", None, [1, 2]])
def test_shown_tokens_takes_a_list_of_token_strings(tokens):
    with pytest.raises(TypeError, match="tokens must be a list of token strings"):
        translation.shown_tokens(tokens)


def test_training_arguments_are_checked_before_the_model_is_built(tmp_path):
    with pytest.raises(ValueError, match="name must be one of"):
        bahdanau.train_and_save("x")
    with pytest.raises(ValueError, match="deadline_minutes"):
        bahdanau.train_and_save("rnn-bahdanau", deadline_minutes=-1)
    with pytest.raises(CheckpointError, match="does not exist"):
        bahdanau.train_and_save("rnn-bahdanau", path=tmp_path / "missing" / "x.pt")
