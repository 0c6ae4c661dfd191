"""Chapter 09: tied embeddings, label smoothing, the warm-up, beam search, the shipped
Transformers and their explorer."""

import itertools
import math
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import transformer_translation as tt
from helpers import translation as tr
from helpers.checkpoints import CheckpointError, checksum_path, save_checkpoint
from helpers.training import sequence_cross_entropy
from helpers.transformer import TransformerConfig, parameter_count

VOCAB = 12


def small_translator(seed: int = 0) -> tt.TransformerTranslator:
    torch.manual_seed(seed)
    model = tt.TransformerTranslator(
        VOCAB, VOCAB, d_model=16, num_heads=2, num_layers=2, d_ff=32, tie_embeddings=True
    )
    with torch.no_grad():  # sharper than at initialisation, so that hypotheses differ
        model.src_embedding.tokens.weight.mul_(6)
        model.output.bias[[tr.PAD_ID, tr.BOS_ID]] = -1e4  # never written, as in a trained model
    return model.eval().double()


@pytest.fixture(scope="module")
def shipped():
    return tt.load_translator("transformer")


def test_tied_embeddings_are_one_tensor_and_counted_once():
    model = small_translator()
    shared = model.src_embedding.tokens.weight
    assert model.tgt_embedding.tokens.weight is shared and model.output.weight is shared
    assert sum(p.numel() for p in model.parameters()) == parameter_count(model.config)
    untied = TransformerConfig(VOCAB, VOCAB, d_model=16, num_heads=2, num_layers=2, d_ff=32)
    assert parameter_count(untied) - parameter_count(model.config) == 2 * VOCAB * 16


def test_tying_needs_one_vocabulary():
    with pytest.raises(ValueError, match="one vocabulary"):
        TransformerConfig(10, 12, tie_embeddings=True)
    with pytest.raises(ValueError, match="tie_embeddings must be True or False"):
        TransformerConfig(10, 10, tie_embeddings="yes")


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_label_smoothing_is_torchs_and_ignores_pads(epsilon):
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 7, generator=generator, dtype=torch.float64)
    targets = torch.tensor([[3, 4, 0, 0], [1, 2, 5, 6]])
    expected = F.cross_entropy(
        logits.flatten(0, 1), targets.flatten(), ignore_index=0, label_smoothing=epsilon
    )
    assert torch.allclose(sequence_cross_entropy(logits, targets, 0, epsilon), expected)
    changed = logits.clone()
    changed[0, 2:] = 100.0  # the pad positions' logits count for nothing
    assert torch.allclose(sequence_cross_entropy(changed, targets, 0, epsilon), expected)


def test_label_smoothing_must_be_a_probability():
    with pytest.raises(ValueError, match="label_smoothing must be a probability"):
        sequence_cross_entropy(torch.randn(1, 2, 3), torch.tensor([[1, 2]]), 0, 1.5)


def test_the_warm_up_rises_to_one_then_falls_as_one_over_the_square_root():
    factors = [tr.inverse_square_root(step, 100) for step in range(400)]
    assert factors[0] == pytest.approx(0.01) and factors[99] == 1.0
    assert all(a < b for a, b in itertools.pairwise(factors[:100]))
    assert factors[399] == pytest.approx(math.sqrt(100 / 400))


def run_beam(model, source, beam_size, max_len=6):
    return tr.beam_search(
        model.decode_step,
        model.start_state(source),
        model.select,
        len(source),
        max_len,
        beam_size,
    )


def test_beam_width_one_is_greedy_decoding():
    model = small_translator()
    source = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0], [4, 2, 0, 0]])
    greedy = model.translate_ids(source, max_len=6)
    tokens, scores, ended = run_beam(model, source, 1)
    chosen, _ = tr.choose_hypothesis(tokens, scores, ended, 0.0)
    assert torch.equal(chosen[:, : greedy.shape[1]], greedy)
    assert torch.allclose(model.log_probability(source, chosen), scores[:, 0])


def all_outputs_of_two_steps():
    """Every output after two steps: <eos> at once, or two tokens (the second maybe <eos>)."""
    writable = [t for t in range(VOCAB) if t not in (tr.PAD_ID, tr.BOS_ID)]
    yield [tr.EOS_ID]
    for first, second in itertools.product(writable, repeat=2):
        if first != tr.EOS_ID:
            yield [first, second]


def test_a_beam_as_wide_as_every_prefix_finds_the_most_probable_output():
    """With max_len 2 and a beam that holds every prefix, the search is exhaustive: its best
    hypothesis is the most probable output (brute force over all of them)."""
    model = small_translator(seed=3)
    source = torch.tensor([[5, 6, 7, 2]])
    tokens, scores, ended = run_beam(model, source, beam_size=VOCAB**2, max_len=2)
    outputs = list(all_outputs_of_two_steps())
    padded = torch.tensor([o + [tr.PAD_ID] * (2 - len(o)) for o in outputs])
    exact = model.log_probability(source.expand(len(outputs), -1), padded)
    best = int(exact.argmax())
    assert tokens[0, 0, : len(outputs[best])].tolist() == outputs[best]
    assert scores[0, 0].item() == pytest.approx(exact[best].item(), abs=1e-9)


def test_the_winner_is_an_ended_hypothesis_and_the_penalty_favours_length():
    tokens = torch.tensor([[[5, tr.EOS_ID, 0, 0], [5, 6, 7, tr.EOS_ID], [5, 6, 7, 8]]])
    scores = torch.tensor([[-1.0, -1.8, -0.5]], dtype=torch.float64)
    ended = torch.tensor([[True, True, False]])
    short, _ = tr.choose_hypothesis(tokens, scores, ended, 0.0)
    long, _ = tr.choose_hypothesis(tokens, scores, ended, 1.0)
    assert short[0].tolist() == [5, tr.EOS_ID, 0, 0]  # -1.0 beats -1.8; -0.5 never ended
    assert long[0].tolist() == [5, 6, 7, tr.EOS_ID]  # -1.8 / 4 beats -1.0 / 2
    nothing_ended = torch.zeros_like(ended)
    best, _ = tr.choose_hypothesis(tokens, scores, nothing_ended, 0.0)
    assert best[0].tolist() == [5, 6, 7, 8]
    with pytest.raises(ValueError, match="length_penalty"):
        tr.choose_hypothesis(tokens, scores, ended, -1)


def test_a_bad_beam_size_is_named():
    model = small_translator()
    with pytest.raises(ValueError, match="beam_size must be a whole number"):
        model.translate_ids(torch.tensor([[5, 2]]), beam_size=0)


def test_the_saved_file_stores_the_tied_matrix_once_and_loads_the_same_model(tmp_path):
    model = tt.build_translator(VOCAB, tt.Recipe(d_model=16, num_heads=2, num_layers=1, d_ff=32))
    path = tmp_path / "transformer.pt"
    tt.save_translator(path, model, {"loss": [1.0], "label_smoothing": 0.1})
    saved = torch.load(path, weights_only=True)
    assert not set(tt.TIED_COPIES) & set(saved["weights"])
    loaded, history = tt.load_translator("transformer", path)
    assert history == {"loss": [1.0], "label_smoothing": 0.1}
    assert loaded.output.weight is loaded.src_embedding.tokens.weight
    for (name, ours), theirs in zip(
        model.state_dict().items(), loaded.state_dict().values(), strict=True
    ):
        assert torch.equal(ours.half().float(), theirs), name


def test_a_model_file_must_be_a_tied_translator(tmp_path):
    with pytest.raises(ValueError, match="name must be one of"):
        tt.load_translator("rnn-bahdanau")
    path = tmp_path / "transformer.pt"
    untied = tt.TransformerTranslator(VOCAB, VOCAB, d_model=16, num_heads=2, num_layers=1)
    tt.save_translator(path, untied, {})
    with pytest.raises(CheckpointError, match="not a tied translation model"):
        tt.load_translator("transformer", path)


def test_the_shipped_transformer_beats_chapter_08s_model_on_held_out_sentences(shipped):
    model, history = shipped
    assert len(history["valid_bleu"]) == tt.RECIPE.epochs
    tokenizer = tr.load_tokenizer()
    score, _ = tr.evaluate_bleu(model, tokenizer, "test", limit=200)
    assert score.score >= 35


def test_translate_with_attention_gives_one_row_per_written_token(shipped):
    model, _ = shipped
    found = tt.translate_with_attention(model, tr.load_tokenizer(), "Tom has a red car.", 2)
    layers, heads = model.config.num_layers, model.config.num_heads
    weights = found["cross_attention"]
    assert weights.shape == (
        layers,
        heads,
        len(found["output_tokens"]),
        len(found["source_tokens"]),
    )
    assert torch.allclose(weights.sum(-1), torch.ones(()))
    assert found["output_tokens"][-1] == "<eos>" and found["translation"]


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "type an English sentence"), ("a " * 13, "at most 12 words"), ("x < y", "never seen")],
)
def test_the_explorer_answers_bad_input_with_a_message(shipped, text, message):
    from helpers.widgets import TransformerTranslationExplorer

    explorer = TransformerTranslationExplorer(model=shipped[0])
    explorer.controls["sentence"].value = text
    assert message in explorer.state["error"]
    explorer.controls["sentence"].value = "I like cats."
    assert "error" not in explorer.state and explorer.state["translation"]


def test_the_explorer_follows_its_controls(shipped):
    from helpers.widgets import TransformerTranslationExplorer

    explorer = TransformerTranslationExplorer("That's my favorite chair.", model=shipped[0])
    first = explorer.state["weights"]
    explorer.controls["head"].value = 2
    assert not torch.equal(first, explorer.state["weights"])
    explorer.controls["head"].value = "mean"
    found = explorer.translation("That's my favorite chair.", explorer.controls["beam"].value)
    layer = explorer.controls["layer"].value
    assert torch.allclose(explorer.state["weights"], found["cross_attention"][layer - 1].mean(0))
    explorer.controls["beam"].value = 1
    assert explorer.state["translation"]


def test_a_sentence_gets_the_same_beam_result_alone_and_in_a_batch(shipped):
    """A sentence whose best hypothesis has ended stands still: the others of its batch cannot
    change its result, with or without length normalisation."""
    model = shipped[0].double()
    tokenizer = tr.load_tokenizer()
    english = tr.grouped_references("test")[0][:24]
    batch = tr.encode(tokenizer, english)
    try:
        for alpha in (0.0, 1.0):
            together = model.translate_ids(batch, beam_size=4, length_penalty=alpha)
            for index, sentence in enumerate(english):
                alone = model.translate_ids(tr.encode(tokenizer, [sentence]), 4, alpha)
                assert tr.decode(tokenizer, alone) == tr.decode(
                    tokenizer, together[index : index + 1]
                )
    finally:
        model.float()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.translate_ids(None), "source must be a torch.Tensor"),
        (lambda m: m.translate_ids(torch.tensor([5, 2])), "source must be"),
        (lambda m: m.translate_ids(torch.tensor([[5, 2]]), max_len=0), "max_len must be"),
        (lambda m: m.translate_ids(torch.tensor([[5, 2]]), length_penalty="x"), "length_penalty"),
        (lambda m: m.translate_ids(torch.tensor([[5, 2]]), 2, True), "length_penalty"),
        (lambda m: m.log_probability(torch.tensor([[5, 2]]), None), "output must be"),
        (lambda m: m.select(m.start_state(torch.tensor([[5, 2]])), torch.tensor([3])), "rows"),
        (lambda m: tr.inverse_square_root(0, 0), "warmup_steps must be"),
        (lambda m: tr.inverse_square_root(-5, 100), "step must be"),
        (lambda m: run_beam(m, torch.tensor([[5, 2]]), 2, max_len=0), "max_len must be"),
        (
            lambda m: tr.choose_hypothesis(
                torch.zeros(1, 2, 3, dtype=torch.long), torch.zeros(2), torch.ones(1, 2) > 0
            ),
            r"scores and ended \(B, k\)",
        ),
        (
            lambda m: tr.choose_hypothesis(
                torch.zeros(1, 2, 3, dtype=torch.long), torch.zeros(1, 2), torch.ones(1, 2)
            ),
            "ended boolean",
        ),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(ValueError, match=message):
        call(small_translator())


def test_training_refuses_a_bad_recipe_before_it_starts():
    with pytest.raises(ValueError, match="warmup_steps must be"):
        tr.train_translator(small_translator(), tr.load_tokenizer(), 1, warmup_steps=-5)
    with pytest.raises(ValueError, match="label_smoothing must be a probability"):
        tr.train_translator(small_translator(), tr.load_tokenizer(), 1, label_smoothing=2)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (torch.tensor([[5, 6, 2], [0, 0, 0]]), "row 1 holds only <pad>"),
        (torch.zeros(1, 0, dtype=torch.long), r"source holds no tokens: shape \(1, 0\)"),
        (torch.zeros(0, 3, dtype=torch.long), r"source holds no tokens: shape \(0, 3\)"),
    ],
)
@pytest.mark.parametrize("beam_size", [1, 2])
def test_a_source_with_nothing_to_translate_is_refused(source, message, beam_size):
    model = small_translator()
    with pytest.raises(ValueError, match=message):
        model.translate_ids(source, beam_size=beam_size)
    with pytest.raises(ValueError, match=message):
        model.log_probability(source, torch.full((len(source), 2), 5))


def constant_step(logits):
    return lambda state, previous: (logits, state)


@pytest.mark.parametrize(
    ("logits", "message"),
    [
        (torch.zeros(4), r"logits \(4, V\), one row each, got \(4,\)"),
        (torch.zeros(3, 10), r"logits \(4, V\), one row each, got \(3, 10\)"),
        (torch.zeros(4, 10, 1), r"got \(4, 10, 1\)"),
        (torch.zeros(4, 10, dtype=torch.long), "floating point"),
        (torch.full((4, 10), float("nan")), r"NaN or \+inf logits at step 0"),
        (torch.full((4, 10), float("inf")), r"\+inf logits at step 0"),
        (torch.full((4, 10), float("-inf")), "a row of only -inf logits at step 0"),
        (torch.zeros(4, 0), "at least 3 tokens"),
        (torch.zeros(4, 2), "at least 3 tokens"),
    ],
)
def test_beam_search_refuses_logits_it_cannot_rank(logits, message):
    with pytest.raises(ValueError, match=message):
        tr.beam_search(constant_step(logits), None, lambda state, rows: state, 2, 3, 2)


@pytest.mark.parametrize(
    ("logits", "message"),
    [
        (torch.full((2, 10), float("nan")), "NaN or \\+inf logits"),
        (torch.full((2, 10), float("inf")), "NaN or \\+inf logits"),
        (torch.full((2, 10), float("-inf")), "a row of only -inf logits"),
        (torch.zeros(2, 0), "at least 3 tokens"),
    ],
)
def test_greedy_decoding_refuses_logits_with_no_token_to_choose(logits, message):
    """+inf and -inf rows used to give token 0 as if it were a translation; V = 0 an
    IndexError from argmax."""
    with pytest.raises(ValueError, match=message):
        tr.translate(constant_step(logits), None, 2, 3)


@pytest.mark.parametrize("previous", [torch.full((2,), VOCAB), torch.full((2,), -1)])
def test_a_decoding_step_refuses_ids_outside_the_vocabulary(previous):
    model = small_translator()
    state = model.start_state(torch.tensor([[5, 2], [6, 2]]))
    with pytest.raises(ValueError, match="previous holds ids from .* outside the vocabulary"):
        model.decode_step(state, previous)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("learning_rate", -1.0, "learning_rate must be"),
        ("warmup_steps", -1, "warmup_steps must be"),
        ("dropout", 1.5, "dropout must be a probability"),
        ("epochs", 0, "epochs must be"),
        ("d_model", 2.5, "d_model must be"),
    ],
)
def test_a_recipe_is_checked_when_it_is_made(field, value, message):
    with pytest.raises((ValueError, TypeError), match=message):
        tt.Recipe(**{field: value})


def test_greedy_decoding_refuses_misshapen_logits():
    with pytest.raises(ValueError, match=r"logits \(2, V\)"):
        tr.translate(constant_step(torch.zeros(10)), None, 2, 3)
    with pytest.raises(TypeError, match=r"must return \(logits, state\)"):
        tr.translate(lambda state, previous: torch.zeros(2, 10), None, 2, 3)


@pytest.mark.parametrize("beam_size", [tr.MAX_BEAM_SIZE + 1, 10**9])
def test_a_beam_too_wide_to_hold_is_refused_before_anything_is_allocated(beam_size):
    with pytest.raises(ValueError, match=f"beam_size must be at most {tr.MAX_BEAM_SIZE}"):
        small_translator().translate_ids(torch.tensor([[5, 2]]), beam_size=beam_size)


def test_choose_hypothesis_refuses_no_hypotheses_and_nan_scores():
    with pytest.raises(ValueError, match="k = 0"):
        tr.choose_hypothesis(
            torch.zeros(1, 0, 3, dtype=torch.long),
            torch.zeros(1, 0),
            torch.zeros(1, 0, dtype=torch.bool),
        )
    tokens = torch.tensor([[[5, 2], [6, 2]]])
    with pytest.raises(ValueError, match="NaN"):
        tr.choose_hypothesis(tokens, torch.tensor([[float("nan"), -1.0]]), torch.ones(1, 2) > 0)
    with pytest.raises(ValueError, match="integer token ids"):
        tr.choose_hypothesis(tokens.float(), torch.zeros(1, 2), torch.ones(1, 2) > 0)


@pytest.mark.parametrize("penalty", [np.float32(1.0), np.float64(0.5), np.int64(1)])
def test_a_numpy_length_penalty_is_a_number(penalty):
    assert tr.check_length_penalty(penalty) == float(penalty)
    small_translator().translate_ids(torch.tensor([[5, 2]]), beam_size=2, length_penalty=penalty)


def test_decode_step_refuses_ids_that_are_not_one_per_sentence():
    model = small_translator()
    state = model.start_state(torch.tensor([[5, 2], [6, 2]]))
    with pytest.raises(ValueError, match=r"previous must be ids \(2,\)"):
        model.decode_step(state, torch.tensor([[1], [1]]))
    with pytest.raises(ValueError, match="integer token ids"):
        model.decode_step(state, torch.tensor([1.0, 1.0]))


def shipped_copy(tmp_path, name, change=None):
    """A copy of a shipped file with its checksum; change(contents) rewrites it (checksum too)."""
    target = tmp_path / f"copy-of-{name}.pt"
    if change is None:
        shutil.copy(tt.model_path(name), target)
        shutil.copy(checksum_path(tt.model_path(name)), checksum_path(target))
        return target
    contents = torch.load(tt.model_path(name), map_location="cpu", weights_only=True)
    change(contents)
    save_checkpoint(target, contents)
    return target


@pytest.mark.parametrize(
    ("stored", "asked"),
    [("transformer", "transformer-no-smoothing"), ("transformer-no-smoothing", "transformer")],
)
def test_a_model_file_must_hold_the_model_its_name_asks_for(tmp_path, stored, asked):
    with pytest.raises(CheckpointError, match=f"label smoothing.*but {asked} is the model"):
        tt.load_translator(asked, shipped_copy(tmp_path, stored))


def weights_as(dtype):
    return lambda contents: contents.update(
        weights={key: value.to(dtype) for key, value in contents["weights"].items()}
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (weights_as(torch.int64), "should be a floating-point tensor, found torch.int64"),
        (lambda c: c["weights"].update({"output.bias": 3}), "output.bias should be a floating"),
        (lambda c: c.update(weights=[1]), "weights should be a dict of tensors"),
        (lambda c: c["config"].update(d_model=65536, d_ff=4), "more than a checkpoint"),
        (lambda c: c["config"].update(dropout=2), "dropout must be a probability"),
        (lambda c: c["weights"].update({"output.bias": torch.zeros(3)}), r"output.bias \(3,\)"),
    ],
)
def test_a_crafted_transformer_file_is_refused(tmp_path, change, message):
    with pytest.raises(CheckpointError, match=message):
        tt.load_translator("transformer", shipped_copy(tmp_path, "transformer", change))


def test_translate_with_attention_names_the_model_it_needs():
    with pytest.raises(TypeError, match="TransformerTranslator"):
        tt.translate_with_attention(None, tr.load_tokenizer(), "Hi.")


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"model": "transformer"}, TypeError, "model must be a TransformerTranslator, got str"),
        ({"model": small_translator()}, ValueError, "vocabulary of 12 tokens"),
        ({"sentence": None}, TypeError, "sentence must be text"),
    ],
)
def test_the_explorer_refuses_a_wrong_model_or_sentence(kwargs, error, message):
    from helpers.widgets import TransformerTranslationExplorer

    with pytest.raises(error, match=message):
        TransformerTranslationExplorer(**kwargs)


def test_the_explorer_says_what_is_wrong_with_a_lone_surrogate(shipped):
    from helpers.widgets import TransformerTranslationExplorer

    explorer = TransformerTranslationExplorer(model=shipped[0])
    explorer.controls["sentence"].value = "I see\ud800."
    assert "not valid text (a lone surrogate U+D800" in explorer.state["error"]
