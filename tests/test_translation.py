"""The English–French data, held out by English sentence; the tokenizer; BLEU; greedy decoding;
and the two stored chapter-08 models."""

import shutil

import pytest
import torch

from helpers import bahdanau, translation
from helpers.checkpoints import CheckpointError


def test_held_out_by_english_sentence():
    train, valid, test = (translation.load_pairs(split) for split in translation.SPLITS)
    english = [{e for e, _ in pairs} for pairs in (train, valid, test)]
    assert not english[0] & english[1] and not english[0] & english[2]
    assert not english[1] & english[2]
    assert len(english[1]) == len(english[2]) == translation.HELD_OUT_SENTENCES
    held_french = {f for _, f in valid + test}
    assert not any(f in held_french for _, f in train)


def test_the_test_set_keeps_every_translation_of_its_sentences():
    sentences, references = translation.grouped_references("test")
    assert len(sentences) == translation.HELD_OUT_SENTENCES
    assert sum(map(len, references)) == len(translation.load_pairs("test"))
    assert max(map(len, references)) > 1


def test_every_kept_sentence_is_short_and_clean():
    for english, french in translation.load_pairs("train")[::97]:
        assert len(english.split()) <= translation.MAX_WORDS
        assert english == translation.clean(english) and french == translation.clean(french)


def test_clean_makes_one_kind_of_space_and_apostrophe():
    assert translation.clean(" Va\u202f!\u00a0 C\u2019est\u200b  ça. ") == "Va ! C'est ça."


def test_an_unknown_split_is_named():
    with pytest.raises(ValueError, match="split must be one of"):
        translation.load_pairs("training")


def test_bleu_counts_any_reference():
    score, signature = translation.bleu(
        ["Il fait beau aujourd'hui.", "Je suis fatigué."],
        [["Il fait beau aujourd'hui."], ["Je suis las.", "Je suis fatigué."]],
    )
    assert score.score == pytest.approx(100.0) and "nrefs:var" in signature
    with pytest.raises(ValueError, match="2 hypotheses for 1 reference lists"):
        translation.bleu(["a", "b"], [["a"]])


def test_the_tokenizer_round_trips_text_in_both_languages():
    tokenizer = translation.load_tokenizer()
    sentences = ["Where is the station?", "Où est la gare ? C'est à côté d'ici."]
    ids = translation.encode(tokenizer, sentences)  # (B, n), <eos> then pads
    assert ids.shape[0] == 2 and (ids == translation.EOS_ID).sum() == 2
    assert translation.decode(tokenizer, ids) == sentences


def test_batches_start_with_bos_end_with_eos_and_are_sized_by_their_shortest_source():
    tokenizer = translation.load_tokenizer()
    pairs = translation.load_pairs("valid")
    batches = list(translation.token_batches(pairs, tokenizer, 500))
    assert sum(len(source) for source, _ in batches) == len(pairs)
    for source, target in batches:
        shortest = int((source != translation.PAD_ID).sum(1).min())  # <eos> included
        assert len(source) <= max(1, 500 // shortest)
        assert (target[:, 0] == translation.BOS_ID).all()
        assert ((source == translation.EOS_ID).sum(1) == 1).all()


def test_greedy_decoding_stops_each_example_at_its_eos():
    script = torch.tensor([[5, translation.EOS_ID, 9], [6, 7, translation.EOS_ID]])

    def step(t, previous):  # emits the scripted token of row b at step t
        logits = torch.full((2, 10), -1.0)
        logits[torch.arange(2), script[:, t]] = 1.0
        return logits, t + 1

    out = translation.translate(step, 0, batch=2, max_len=5)
    assert out.tolist() == [[5, translation.EOS_ID, translation.PAD_ID], [6, 7, translation.EOS_ID]]


def test_both_stored_models_translate_and_attention_wins_on_held_out_sentences():
    tokenizer = translation.load_tokenizer()
    scores = {
        name: translation.evaluate_bleu(bahdanau.load_translator(name)[0], tokenizer, limit=200)
        for name in bahdanau.MODELS
    }
    assert scores["rnn-bahdanau"][0].score >= 28
    assert scores["rnn-bahdanau"][0].score > scores["rnn-bottleneck"][0].score + 3


def test_a_damaged_model_file_is_refused(tmp_path):
    copy = tmp_path / "rnn-bahdanau.pt"
    shutil.copy(bahdanau.model_path("rnn-bahdanau"), copy)
    shutil.copy(bahdanau.model_path("rnn-bahdanau").with_suffix(".pt.sha256"), tmp_path)
    with copy.open("r+b") as file:
        file.seek(1000)
        file.write(b"\x00\x01\x02")
    with pytest.raises(CheckpointError, match="damaged.*make translation-models"):
        bahdanau.load_translator("rnn-bahdanau", copy)


def test_a_model_file_must_match_its_name():
    with pytest.raises(CheckpointError, match="attention=False, expected True"):
        bahdanau.load_translator("rnn-bahdanau", bahdanau.model_path("rnn-bottleneck"))
    with pytest.raises(ValueError, match="name must be one of"):
        bahdanau.load_translator("transformer")


def test_attention_weights_cover_only_the_real_source_tokens():
    model, _ = bahdanau.load_translator("rnn-bahdanau")
    tokenizer = translation.load_tokenizer()
    source = translation.encode(tokenizer, ["I see.", "She has a red car and a blue bike."])
    model.translate_ids(source)
    weights = torch.stack(model.attention_weights, 1)  # (B, steps, S)
    lengths = (source != translation.PAD_ID).sum(1)
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:2]))
    assert (weights[0, :, lengths[0] :] == 0).all()


@pytest.mark.parametrize(
    ("hypotheses", "references", "error", "message"),
    [
        ("abc", [["a"], ["b"], ["c"]], TypeError, "hypotheses must be a list of translated"),
        (["a b"], ["a b"], TypeError, "item 0 is one string"),
        (["a"], "a", TypeError, "references must be a list of lists of strings"),
        ([None], [["a"]], TypeError, "hypotheses .* item 0 is NoneType"),
        (["a"], [["a", None]], TypeError, r"references\[0\] .* item 1 is NoneType"),
        (["a"], [[]], ValueError, r"references\[0\] is empty"),
        ([], [], ValueError, "no hypotheses to score"),
    ],
)
def test_bleu_refuses_text_it_would_read_as_characters(hypotheses, references, error, message):
    with pytest.raises(error, match=message):
        translation.bleu(hypotheses, references)


@pytest.mark.parametrize(
    ("sentences", "error", "message"),
    [
        ("hello", TypeError, "sentences must be a list of sentence strings, got str"),
        ([], ValueError, "sentences is empty"),
        ([None], TypeError, "item 0 is NoneType"),
        (["I see\ud800."], ValueError, "not valid text .*lone surrogate U\\+D800"),
    ],
)
def test_encode_refuses_what_is_not_a_list_of_sentences(sentences, error, message):
    with pytest.raises(error, match=message):
        translation.encode(translation.load_tokenizer(), sentences)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.tensor([[5, 99999]]), "outside the vocabulary 0..7999"),
        (torch.tensor([[-1]]), "outside the vocabulary"),
        (torch.tensor([300, 2]), r"ids must be \(B, n\), got shape \(2,\)"),
        (torch.tensor([[5.0]]), "integer token ids"),
        ([[5, 6]], "torch.Tensor"),
    ],
)
def test_decode_refuses_ids_outside_the_vocabulary_and_other_shapes(ids, message):
    with pytest.raises(ValueError, match=message):
        translation.decode(translation.load_tokenizer(), ids)


@pytest.mark.parametrize("max_tokens", [0, -5, 2.5, True])
def test_a_batch_size_in_tokens_must_be_a_positive_whole_number(max_tokens):
    tokenizer = translation.load_tokenizer()
    with pytest.raises(ValueError, match="max_tokens must be a whole number >= 1"):
        translation.token_batches(translation.load_pairs("valid")[:5], tokenizer, max_tokens)
    with pytest.raises(ValueError, match="max_tokens must be a whole number >= 1"):
        translation.train_translator(torch.nn.Linear(1, 1), tokenizer, 1, max_tokens=max_tokens)


@pytest.fixture(scope="module")
def rnn_translator():
    return bahdanau.load_translator("rnn-bahdanau")[0]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"limit": -995}, "limit .* must be a whole number >= 1, got -995"),
        ({"limit": 0}, "limit .* got 0"),
        ({"limit": 5, "batch_size": 0}, "batch_size must be a whole number >= 1"),
        ({"limit": 5, "batch_size": -1}, "batch_size must be a whole number >= 1"),
        ({"limit": 5, "beam_size": 4}, "decodes greedily only"),
    ],
)
def test_evaluate_bleu_refuses_a_limit_or_batch_it_cannot_use(rnn_translator, arguments, message):
    with pytest.raises(ValueError, match=message):
        translation.evaluate_bleu(rnn_translator, translation.load_tokenizer(), **arguments)


def tiny_transformer():
    from helpers.transformer_translation import TransformerTranslator

    torch.manual_seed(0)
    size = translation.VOCAB_SIZE
    return TransformerTranslator(size, size, 16, 2, 1, 32, tie_embeddings=True)


def few_pairs(split):
    return list(translation._splits()[split][:20])


@pytest.mark.parametrize(("answer", "epochs"), [(None, 2), (True, 2), (False, 1)])
def test_after_epoch_stops_the_training_only_by_returning_false(monkeypatch, answer, epochs):
    monkeypatch.setattr(translation, "load_pairs", few_pairs)
    history = translation.train_translator(
        tiny_transformer(),
        translation.load_tokenizer(),
        2,
        log=lambda line: None,
        after_epoch=lambda history: answer,
    )
    assert len(history["loss"]) == epochs


def test_after_epoch_must_answer_true_false_or_none(monkeypatch):
    monkeypatch.setattr(translation, "load_pairs", few_pairs)
    with pytest.raises(TypeError, match="after_epoch must return True .* got 0"):
        translation.train_translator(
            tiny_transformer(),
            translation.load_tokenizer(),
            2,
            log=lambda line: None,
            after_epoch=lambda history: 0,
        )


def test_a_seed_torch_cannot_take_is_refused_before_training():
    with pytest.raises(ValueError, match="seed must be below 2\\^32"):
        translation.train_translator(
            torch.nn.Linear(1, 1), translation.load_tokenizer(), 1, seed=2**70
        )
