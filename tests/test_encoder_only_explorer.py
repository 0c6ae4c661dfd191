"""Chapter 15's explorer shows what the helpers compute: the guesses are fill_in's, the map is
the model's attention of the layer and head chosen, the match probability is the pair model's
softmax; bad input is answered in the figure, bad arguments and control values by name; a
layer or a head redraws the map alone, and the picture is the one a full redraw makes."""

import copy

import numpy as np
import pytest
import torch
from traitlets import TraitError

from helpers import encoder_only
from helpers.encoder_only import (
    EncoderConfig,
    PairClassifier,
    TextEncoder,
    fill_in,
    load_encoder_tokenizer,
    pair_row,
    sentence_rows,
)
from helpers.widgets import FillInExplorer

SMALL = {"d_model": 16, "num_heads": 2, "num_layers": 2, "d_ff": 32}


@pytest.fixture(scope="module")
def tokenizer():
    return load_encoder_tokenizer()


@pytest.fixture(scope="module")
def models():
    """Freshly initialised small models (in training mode: the explorer reads eval copies)."""
    torch.manual_seed(0)
    masked = TextEncoder(EncoderConfig(**SMALL))
    causal = TextEncoder(EncoderConfig(**SMALL, causal=True))
    pair = PairClassifier(TextEncoder(EncoderConfig(**SMALL)))
    return {"masked": masked, "causal": causal}, pair


@pytest.fixture
def explorer(models):
    return FillInExplorer(models=models[0], pair_model=models[1])


def row_of(tokenizer, sentence: str) -> list[int]:
    return sentence_rows(tokenizer[0], [sentence], tokenizer[1])[0]


def attention_of(model: TextEncoder, ids: torch.Tensor, segments=None) -> torch.Tensor:
    """(layers, heads, n, n): the float64 eval copy's weights reading one row."""
    copy64 = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        copy64(ids, segments)
    return torch.stack([block.self_attention.attention_weights[0] for block in copy64.blocks])


def test_the_guesses_are_fill_in_of_the_same_models(explorer, models, tokenizer):
    first = explorer.state
    assert first["pieces"] == ["[CLS]", "▁Tom", "▁has", "▁a", "▁blue", "▁car.", "[SEP]"]
    assert first["hidden"] == 3 and first["truth"] == "▁a"  # the middle of five pieces
    for token in (3, 1, 5):
        explorer.controls["token"].value = token
        state, row = explorer.state, row_of(tokenizer, "Tom has a blue car.")
        for name, model in (("both ways", models[0]["masked"]), ("left only", models[0]["causal"])):
            ids, probabilities = fill_in(model, [row], [token], k=5)
            shown = state[name]
            assert [piece for piece, _ in shown] == [tokenizer[0].id_to_token(i) for i in ids[0]]
            assert [p for _, p in shown] == pytest.approx(probabilities[0].tolist(), rel=1e-12)
        assert state["truth"] == tokenizer[0].id_to_token(row[token])
    assert models[0]["masked"].training  # the explorer's copies are read, not the models


def test_the_hidden_pieces_probability_and_rank(explorer, models, tokenizer):
    row = row_of(tokenizer, "Tom has a blue car.")
    ids, probabilities = fill_in(models[0]["masked"], [row], [3], k=8003)  # every piece, ranked
    rank = ids[0].tolist().index(row[3]) + 1
    assert explorer.state["truth rank"]["both ways"] == rank
    assert explorer.state["truth probability"]["both ways"] == pytest.approx(
        probabilities[0, rank - 1].item(), rel=1e-12
    )


def test_the_map_is_the_encoders_attention_with_the_piece_hidden(explorer, models, tokenizer):
    row = row_of(tokenizer, "Tom has a blue car.")
    masked = torch.tensor([row])
    masked[0, 3] = encoder_only.MASK_ID
    weights = attention_of(models[0]["masked"], masked)
    for layer, head in ((2, 1), (1, 2), (2, "mean")):
        explorer.controls["layer"].value = layer
        explorer.controls["head"].value = head
        expected = weights[layer - 1].mean(0) if head == "mean" else weights[layer - 1, head - 1]
        np.testing.assert_allclose(explorer.state["weights"], expected.numpy(), rtol=1e-12)
    assert explorer.state["tokens"] == ["[CLS]", "Tom", "has", "[MASK]", "blue", "car.", "[SEP]"]
    assert explorer.state["weights"].shape == (7, 7)
    assert "layer 2, mean of the heads" in explorer._map_ax.get_title()


def test_a_new_sentence_offers_its_pieces_and_keeps_a_valid_choice(explorer):
    token = explorer.controls["token"]
    explorer.controls["sentence"].value = "I know."  # two pieces: position 3 is gone
    assert token.options == (("1: ▁I", 1), ("2: ▁know.", 2))
    assert token.value == 2 and explorer.state["hidden"] == 2  # the middle piece
    explorer.controls["sentence"].value = "Tom a une voiture bleue."
    assert [label for label, _ in token.options][-2:] == ["5: ▁bleu", "6: e."]
    assert token.value == 2 and explorer.state["truth"] == "▁a"  # the same position, kept
    explorer.controls["sentence"].value = ""  # unreadable: the menu stays as it was
    assert len(token.options) == 6 and "error" in explorer.state


def test_a_new_sentence_redraws_once(explorer):
    """Its token menu is set as it follows: one redraw, not one per control set."""
    drawn = []
    render = explorer.render_png
    explorer.render_png = lambda: drawn.append(1) or render()
    explorer.controls["sentence"].value = "I see."
    assert len(drawn) == 1


@pytest.mark.parametrize(
    ("sentence", "message"),
    [
        ("", "type a sentence"),
        ("   ", "type a sentence"),
        ("word " * 80, "more than the 80 the models read"),
        ("Tom has a [MASK] car.", "[MASK] is one of the models' own tokens"),
        ("I <pad> you", "<pad> is one of the models' own tokens"),
        ("I like 😀.", "the tokenizer has never seen these characters: U+1F600"),
        ("\ud800", "not valid text (a lone surrogate U+D800"),
    ],
)
def test_bad_sentences_are_answered_in_the_figure(explorer, sentence, message):
    explorer.controls["sentence"].value = sentence
    assert set(explorer.state) == {"error"} and message in explorer.state["error"]
    title = explorer.figure.axes[0].title
    assert title.get_text().startswith("⚠") and title.get_color() == "tab:red"
    assert all(bar.get_width() == 0 for bar in explorer._bars)  # no guesses left beside it
    assert not any(label.get_text() for label in explorer._bar_labels)
    explorer.controls["sentence"].value = "Tom has a blue car."
    assert "error" not in explorer.state and len(explorer.state["both ways"]) == 5


def test_a_translation_shows_the_pair_models_match_and_attention(explorer, models, tokenizer):
    pair = models[1]
    explorer.controls["translation"].value = "Tom a une voiture bleue."
    state = explorer.state
    row, segments = pair_row(*tokenizer, "Tom has a blue car.", "Tom a une voiture bleue.")
    ids, segments = torch.tensor([row]), torch.tensor([segments])
    with torch.no_grad():
        logits = copy.deepcopy(pair).double().eval()(ids, segments)
    assert state["view"] == "pair"
    assert state["match"] == pytest.approx(logits.softmax(-1)[0, 1].item(), rel=1e-12)
    assert f"match probability {state['match']:.2f}" in explorer.figure.axes[0].get_title()
    assert state["tokens"][:7] == ["[CLS]", "Tom", "has", "a", "blue", "car.", "[SEP]"]
    assert state["tokens"][-1] == "[SEP]" and len(state["tokens"]) == len(row)
    weights = attention_of(pair.encoder, ids, segments)
    explorer.controls["head"].value = 2
    np.testing.assert_allclose(explorer.state["weights"], weights[-1, 1].numpy(), rtol=1e-12)
    with torch.no_grad():  # the float32 model agrees to float32's precision
        expected = pair.eval()(ids, segments).softmax(-1)[0, 1].item()
    pair.train()
    assert state["match"] == pytest.approx(expected, abs=1e-5)
    assert explorer.state["both ways"] == state["both ways"]  # the guesses stay the sentence's
    explorer.controls["translation"].value = "  "  # nothing: the sentence alone again
    assert explorer.state["view"] == "sentence" and explorer.state["match"] is None


def test_a_pair_too_long_is_answered_in_the_figure(explorer):
    explorer.controls["sentence"].value = "word " * 40
    assert "error" not in explorer.state
    explorer.controls["translation"].value = "mot " * 40
    assert "the pair reads as 83 tokens" in explorer.state["error"]


def test_a_layer_or_a_head_redraws_the_map_alone_and_computes_nothing(explorer, monkeypatch):
    from helpers.widgets import ch15_encoder_only as module

    explorer.controls["translation"].value = "Tom a une voiture bleue."
    monkeypatch.setattr(module, "_attention", lambda model: pytest.fail("computed again"))
    drawn, draw_artist = [], explorer.figure.draw_artist
    explorer.figure.draw_artist = lambda artist: drawn.append(artist) or draw_artist(artist)
    explorer.controls["head"].value = "mean"
    explorer.controls["layer"].value = 1
    assert drawn == explorer._panels["map"] * 2


STEPS = [
    ("token", 1),
    ("head", 2),
    ("layer", 1),
    ("translation", "Tom a une voiture bleue."),
    ("head", "mean"),
    ("sentence", "I know."),
    ("sentence", ""),  # an error, then back
    ("sentence", "Tom has a blue car."),
    ("translation", ""),
    ("token", 4),
]


def test_each_redraw_is_the_picture_a_full_redraw_makes(explorer):
    for name, value in STEPS:
        explorer.controls[name].value = value
        shown = bytes(explorer.image.value)
        explorer.redraw_background()
        assert explorer.render_png() == shown, (name, value)


@pytest.mark.parametrize(
    ("name", "value", "options"),
    [
        ("token", 9, "token to hide must be one of 1, 2, 3, 4, 5; got 9"),
        ("token", True, "token to hide must be one of 1, 2, 3, 4, 5; got True"),
        ("layer", 3, "layer must be one of 1, 2; got 3"),
        ("head", "all", "head must be one of 1, 2, 'mean'; got 'all'"),
    ],
)
def test_a_control_set_to_what_it_does_not_offer_names_its_options(explorer, name, value, options):
    with pytest.raises(TraitError, match=options.replace("(", r"\(")):
        explorer.controls[name].value = value


def test_a_menu_set_to_nothing_asks_for_a_value_over_an_emptied_figure(explorer):
    explorer.controls["token"].value = None
    assert explorer.state == {"error": "choose a value for token"}
    assert not any(label.get_text() for label in explorer._map.x_labels)
    explorer.controls["token"].value = 2
    assert explorer.state["hidden"] == 2


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"layer": 3}, "layer must be one of 1..2, got 3"),
        ({"head": 0}, 'head must be one of 1..2 or "mean", got 0'),
        ({"token": 6}, "token must be one of 1..5"),
        ({"token": True}, "token must be a whole number"),
    ],
)
def test_draw_is_held_to_what_the_menus_offer(explorer, values, message):
    with pytest.raises(ValueError, match=message):
        explorer.draw(**{**explorer.values(), **values})


def other_models(models, **changes):
    return {**models[0], **changes}


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"sentence": 3}, TypeError, "sentence must be text"),
        ({"translation": None}, TypeError, "translation must be text"),
        ({"sentence": ""}, ValueError, "type a sentence"),
        ({"translation": "mot " * 80}, ValueError, "the pair reads as"),
        ({"token": "3"}, TypeError, "token must be a whole number"),
        ({"token": 0}, ValueError, r"token must be one of 1..5 \(the sentence's pieces"),
        ({"token": 6}, ValueError, "token must be one of 1..5"),
        ({"layer": 0}, ValueError, "layer must be one of 1..2, got 0"),
        ({"head": "all"}, ValueError, "head must be one of 1..2 or \"mean\", got 'all'"),
        ({"models": []}, TypeError, 'models must be a dict with the keys "masked" and "causal"'),
        ({"models": {"masked": 1}}, TypeError, r"got the keys \['masked'\]"),
        ({"pair_model": "pair"}, TypeError, "pair_model must be a PairClassifier, got str"),
    ],
)
def test_bad_arguments_are_refused_by_name(models, arguments, error, message):
    with pytest.raises(error, match=message):
        FillInExplorer(**{"models": models[0], "pair_model": models[1], **arguments})


def test_models_that_do_not_fit_are_refused_by_name(models):
    masked, causal = models[0]["masked"], models[0]["causal"]
    wide = PairClassifier(TextEncoder(EncoderConfig(**{**SMALL, "num_layers": 3})))
    for arguments, error, message in [
        ({"models": {"masked": causal, "causal": causal}}, ValueError, "models\\['masked'\\]"),
        ({"models": {"masked": masked, "causal": masked}}, ValueError, "the causal twin"),
        ({"models": {"masked": masked, "causal": "x"}}, TypeError, "must be a TextEncoder"),
        ({"pair_model": wide}, ValueError, "3 layers of 2 heads against 2 of 2"),
    ]:
        with pytest.raises(error, match=message):
            FillInExplorer(**{"models": models[0], "pair_model": models[1], **arguments})


SAVED = (encoder_only.SAVED_PRETRAINED, encoder_only.SAVED_FINETUNED)


@pytest.mark.skipif(
    not all(path.exists() for path in SAVED), reason="the chapter's models are not trained yet"
)
def test_the_default_view_of_the_saved_models_renders():
    explorer = FillInExplorer()
    assert "error" not in explorer.state and len(explorer.state["both ways"]) == 5
    png = explorer._repr_png_()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    explorer.controls["translation"].value = "Tom a une voiture bleue."
    assert 0 <= explorer.state["match"] <= 1 and explorer._repr_png_() != png


def test_models_whose_weights_hold_no_numbers_or_nan_are_refused(models):
    encoders, pair = models
    diverged = TextEncoder(EncoderConfig(**SMALL))
    with torch.no_grad():
        diverged.tokens.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match="models\\['masked'\\]'s weight tokens.weight holds NaN"):
        FillInExplorer(models={**encoders, "masked": diverged}, pair_model=pair)
    with torch.device("meta"):
        empty = PairClassifier(TextEncoder(EncoderConfig(**SMALL)))
    with pytest.raises(ValueError, match="pair_model's weight .* is on the meta device"):
        FillInExplorer(models=encoders, pair_model=empty)
