"""Chapter 12's explorer draws anew only the parts of its figure whose look changed, and the
picture is the same as drawing everything; it keeps what a control does not change (the
prompt's reading, the samples of a setting) and holds draw() to what its menus offer."""

import dataclasses

import numpy as np
import pytest
import torch

from helpers import decoder_only
from helpers.gpt import next_token_probabilities
from helpers.widgets import DecoderOnlyExplorer


def tiny(
    seed: int, context_length: int = decoder_only.RECIPE.context_length
) -> decoder_only.DecoderOnlyTranslator:
    small = dataclasses.replace(
        decoder_only.RECIPE,
        num_layers=2,
        d_model=32,
        d_ff=32,
        num_heads=2,
        dropout=0.0,
        context_length=context_length,
    )
    torch.manual_seed(seed)
    return decoder_only.build_translator(8001, 8000, small)


@pytest.fixture(scope="module")
def models():
    return {"translate": tiny(0), "continue": tiny(1)}


@pytest.fixture
def explorer(models):
    return DecoderOnlyExplorer(models=models)


STEPS = [
    ("temperature", 0.0),
    ("temperature", 1.3),
    ("top_p", 0.05),
    ("top_p", 1.0),
    ("top_k", 3),
    ("seed", 4),
    ("layer", 1),
    ("head", 2),
    ("task", "continue"),
    ("prompt", "I don't think Tom knows where Mary lives."),
    ("prompt", ""),  # a prompt it cannot read: the message, then back
    ("prompt", "Tom has a blue car."),
    ("task", "translate"),
    ("seed", 0),
]


def test_each_redraw_is_the_picture_a_full_redraw_makes(explorer):
    """Only the parts whose look changed are drawn anew, and the others keep their pixels:
    after every control, drawing the whole figure again gives the same PNG."""
    for name, value in STEPS:
        explorer.controls[name].value = value
        shown = bytes(explorer.image.value)
        explorer.redraw_background()
        assert explorer.render_png() == shown, (name, value)


def drawn_panels(explorer, change) -> set[str]:
    """The panels whose artists the figure draws while `change` runs."""
    owner = {id(a): panel for panel, artists in explorer._panels.items() for a in artists}
    drawn, draw_artist = set(), explorer.figure.draw_artist

    def recording(artist):
        drawn.add(owner[id(artist)])
        draw_artist(artist)

    explorer.figure.draw_artist = recording
    try:
        change()
    finally:
        explorer.figure.draw_artist = draw_artist
    return drawn


def test_a_control_draws_anew_only_what_it_changes(explorer):
    controls = explorer.controls
    assert drawn_panels(explorer, lambda: setattr(controls["head"], "value", 2)) == {"attention"}
    assert drawn_panels(explorer, lambda: setattr(controls["layer"], "value", 1)) == {"attention"}
    seed = drawn_panels(explorer, lambda: setattr(controls["seed"], "value", 3))
    assert "title" in seed and seed <= {"title", "line 1", "line 2", "line 3"}
    temperature = drawn_panels(explorer, lambda: setattr(controls["temperature"], "value", 0.5))
    assert {"title", "distribution"} <= temperature and not temperature & {"keys", "attention"}
    prompt = drawn_panels(explorer, lambda: setattr(controls["prompt"], "value", "I see."))
    assert prompt == set(explorer._panels) - {"title"}  # the title names the settings only


def test_going_back_to_a_setting_reads_and_samples_nothing_again(explorer, monkeypatch):
    controls = explorer.controls
    controls["seed"].value = 5
    controls["task"].value = "continue"
    controls["task"].value = "translate"
    first = explorer.state["samples"]
    import helpers.widgets.ch12_decoder_only as module

    def never(*arguments, **options):
        raise AssertionError("computed again")

    monkeypatch.setattr(module, "_sample_texts", never)
    monkeypatch.setattr(module, "read_prompt", never)
    controls["seed"].value = 0
    controls["seed"].value = 5
    controls["task"].value = "continue"
    controls["task"].value = "translate"
    assert "error" not in explorer.state and explorer.state["samples"] == first


def test_a_new_sample_setting_reads_the_models_weights_once(explorer, monkeypatch):
    """The redraw checked the kept reading against the model's weights, then generate checked
    it again: two passes over every weight's bytes for one new seed."""
    from helpers import gpt

    fingerprinted = []
    original = gpt._weight_checksums
    monkeypatch.setattr(
        gpt, "_weight_checksums", lambda model: fingerprinted.append(1) or original(model)
    )
    explorer.controls["seed"].value = 7
    assert "error" not in explorer.state and len(fingerprinted) == 1


def test_a_numpy_seed_samples_as_its_int_does(explorer):
    """The explorer handed numpy's int32 to torch's manual_seed, which refused it."""
    first = explorer.samples("translate", "Tom has a blue car.", 1.0, None, None, np.int32(7))
    assert first == explorer.samples("translate", "Tom has a blue car.", 1.0, None, None, 7)
    fresh = DecoderOnlyExplorer(models=explorer.models)
    assert fresh.samples("translate", "I see.", 1.2, None, None, np.int64(3)) == fresh.samples(
        "translate", "I see.", 1.2, None, None, 3
    )


def test_samples_written_from_the_kept_reading_are_sample_texts(explorer, models):
    explorer.controls["temperature"].value = 1.2
    ids = decoder_only.text_prompt(explorer.tokenizer, 8000, "Tom has a blue car.", "translate")
    english = ids.shape[1] - 2
    expected = decoder_only.sample_texts(
        models["translate"], explorer.tokenizer, ids, 3, 2 * english + 5, 1.2, None, 0.9, 0
    )
    assert explorer.state["samples"] == expected


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"layer": 3}, r"layer must be one of 1..2, got 3"),
        ({"layer": 0}, r"layer must be one of 1..2, got 0"),
        ({"head": 0}, r"head must be one of 1..2, got 0"),  # was the last head, silently
        ({"head": True}, r"head must be one of 1..2, got True"),
        ({"task": "summarise"}, r"task must be one of \['translate', 'continue'\]"),
    ],
)
def test_draw_is_held_to_what_the_menus_offer(explorer, values, message):
    """draw() called directly raised an IndexError for layer 9, a KeyError for a task, and
    drew the last head for head 0."""
    with pytest.raises(ValueError, match=message):
        explorer.draw(**{**explorer.values(), **values})


def test_draw_takes_numpys_whole_numbers_for_a_layer_and_a_head(explorer):
    """np.int64(2) was refused by _check_view as 'layer must be one of 1..2, got 2'."""
    explorer.draw(**{**explorer.values(), "layer": 2, "head": 1})
    expected = explorer.state["attention"]
    explorer.draw(**{**explorer.values(), "layer": np.int64(2), "head": np.int32(1)})
    assert torch.equal(explorer.state["attention"], expected)


@pytest.mark.parametrize(
    "call",
    [
        lambda e, models: DecoderOnlyExplorer(task=["translate"], models=models),
        lambda e, models: e.model("bogus"),
        lambda e, models: e.model(None),
        lambda e, models: e.reading("bogus", "Tom"),
        lambda e, models: e.samples(["translate"], "Tom", 1.0, None, None, 0),
    ],
    ids=["task a list", "model bogus", "model None", "reading bogus", "samples task a list"],
)
def test_a_task_it_has_no_model_for_is_named(explorer, models, call):
    """A list raised "unhashable type: 'list'", and model() and reading() a bare KeyError."""
    with pytest.raises(ValueError, match=r"task must be one of \['translate', 'continue'\], got"):
        call(explorer, models)


@pytest.mark.parametrize("prompt", [None, ["Tom"]], ids=["None", "a list"])
def test_a_prompt_that_is_not_text_is_named_by_every_method(explorer, models, prompt):
    """The text field holds only text; called directly, draw(), reading() and samples() name a
    prompt that is not, as the constructor does (a list raised "unhashable type: 'list'")."""
    message = f"prompt must be text \\(a str\\), got {type(prompt).__name__}"
    for call in (
        lambda: DecoderOnlyExplorer(prompt, models=models),
        lambda: explorer.draw(**{**explorer.values(), "prompt": prompt}),
        lambda: explorer.reading("translate", prompt),
        lambda: explorer.samples("translate", prompt, 1.0, None, None, 0),
    ):
        with pytest.raises(TypeError, match=message):
            call()


SETTINGS = {"temperature": 1.0, "top_k": None, "top_p": None, "seed": 0}  # samples() takes


@pytest.mark.parametrize(
    ("name", "kept", "message"),
    [
        ("seed", 1, "seed must be a whole number >= 0, got True"),
        ("temperature", 1.0, "temperature must be an int or a float, got the bool True"),
        ("top_k", 1, "top_k must be a whole number >= 1, got True"),
    ],
)
def test_true_is_not_the_number_one_of_a_sample_setting(explorer, name, kept, message):
    """True equals 1 as a key: it fetched the samples kept for 1 (seed: "seed True" over seed
    1's samples), or raised a ValueError outside the figure (temperature, top-k)."""
    explorer.controls[name].value = kept  # the samples for 1 are kept
    assert "error" not in explorer.state
    explorer.draw(**{**explorer.values(), name: True})
    assert message in explorer.state["error"]
    with pytest.raises(ValueError, match=message):
        explorer.samples("translate", "Tom", **{**SETTINGS, name: True})


def test_a_prompt_that_fills_the_context_says_there_is_no_room_to_write():
    """A prompt as long as the model's context leaves no token to write: every sample said it
    "wrote <eos> at once"."""
    prompt = "I like cats and dogs."  # <bos>, 6 pieces, <sep>: 8 ids
    models = {"translate": tiny(0, context_length=8), "continue": tiny(1, context_length=8)}
    explorer = DecoderOnlyExplorer(prompt, models=models)
    assert explorer.reading("translate", prompt)["ids"].shape == (1, 8)
    assert explorer.state["samples"] == [""] * 3
    lines = [line.get_text() for line in explorer._sample_lines[1:]]
    no_room = "(no room left: the prompt fills the model's context of 8 tokens)"
    assert lines == [f"{i}. {no_room}" for i in (1, 2, 3)]


def test_a_prompt_longer_than_the_context_asks_for_a_shorter_sentence():
    """It said 'ids: 10 positions do not fit in the context of 8: keep the last 8', advice
    about ids the learner never sees."""
    models = {"translate": tiny(0, context_length=8), "continue": tiny(1, context_length=8)}
    explorer = DecoderOnlyExplorer("Hi.", models=models)
    explorer.controls["prompt"].value = "I think that this is fine and good."
    too_long = "the prompt's 10 tokens do not fit the model's context of 8 tokens: type a shorter"
    assert explorer.state["error"].startswith(too_long)
    with pytest.raises(ValueError, match=too_long):
        explorer.reading("translate", "I think that this is fine and good.")


@pytest.mark.parametrize("name", ["layer", "head", "top_k", "task"])
def test_a_menu_set_to_nothing_clears_the_earlier_results(explorer, name):
    """The title said '⚠ choose a value for layer' over the previous samples, prompt line, bars
    and tokens, as if they were the answer to it."""
    kept = explorer.controls[name].value
    explorer.controls[name].value = None
    assert explorer.state == {"error": f"choose a value for {name}"}
    assert explorer.figure.axes[0].get_title() == f"⚠ choose a value for {name}"
    texts = [
        *explorer._sample_lines,
        *explorer._token_labels,
        *explorer._value_labels,
        *explorer._key_labels,
    ]
    assert [text.get_text() for text in texts] == [""] * len(texts)
    assert all(bar.get_width() == 0 for bar in (*explorer._model_bars, *explorer._sampled_bars))
    assert all(bar.get_height() == 0 for bar in explorer._attention_bars)
    shown = bytes(explorer.image.value)
    explorer.redraw_background()
    assert explorer.render_png() == shown  # the picture is the emptied figure
    explorer.controls[name].value = kept
    assert len(explorer.state["samples"]) == 3 and explorer._sample_lines[1].get_text()


# After a seventh hostile pass: a model changed in place is read again.


def current_samples(explorer, models) -> list[str]:
    """What sample_texts writes now from the explorer's model at its current settings."""
    controls = explorer.controls
    ids = decoder_only.text_prompt(explorer.tokenizer, 8000, controls["prompt"].value, "translate")
    return decoder_only.sample_texts(
        models["translate"], explorer.tokenizer, ids, 3, 2 * (ids.shape[1] - 2) + 5,
        controls["temperature"].value, None, controls["top_p"].value, controls["seed"].value,
    )  # fmt: skip


CHANGES = {  # each change, and whether it changes what the model writes
    "in place": (lambda m: m.tokens.weight.requires_grad_(False).mul_(-1), True),
    "through .data": (lambda m: m.tokens.weight.data.mul_(-1), True),
    "to float64": (lambda m: m.double(), False),
}


@pytest.mark.parametrize(("change", "writes_otherwise"), CHANGES.values(), ids=list(CHANGES))
def test_a_model_changed_since_its_prompt_was_read_is_read_again(change, writes_otherwise):
    """The explorer showed the old model's samples, or was stuck on 'read them again with
    read_prompt' or 'caches of another model, or filled before a .to()'."""
    models = {"translate": tiny(0), "continue": tiny(1)}
    explorer = DecoderOnlyExplorer(models=models)
    before = explorer.state["samples"]
    change(models["translate"])
    explorer.controls["seed"].value = 1
    explorer.controls["seed"].value = 0  # a setting whose samples were kept
    assert "error" not in explorer.state, explorer.state["error"]
    assert explorer.state["samples"] == current_samples(explorer, models)
    assert (explorer.state["samples"] != before) == writes_otherwise
    with torch.no_grad():
        logits = models["translate"](explorer.reading("translate", "Tom has a blue car.")["ids"])
    torch.testing.assert_close(
        explorer.reading("translate", "Tom has a blue car.")["logits"], logits[:, -1]
    )


def test_the_explorer_leaves_every_module_of_its_model_in_its_own_mode():
    models = {"translate": tiny(0), "continue": tiny(1)}
    models["translate"].train()
    models["translate"].blocks[0].eval()
    modes = [module.training for module in models["translate"].modules()]
    DecoderOnlyExplorer(models=models)
    assert [module.training for module in models["translate"].modules()] == modes


def test_samples_kept_beyond_their_forgotten_reading_are_not_shown_after_a_change(monkeypatch):
    """A prompt's samples outlived its reading (8 readings kept, 64 samples): read again after
    the model changed, the prompt still showed the old model's samples."""
    import helpers.widgets.ch12_decoder_only as module

    monkeypatch.setattr(module, "REMEMBERED_READINGS", 1)
    models = {"translate": tiny(0), "continue": tiny(1)}
    explorer = DecoderOnlyExplorer(models=models)
    before = explorer.state["samples"]
    explorer.controls["prompt"].value = "I see."  # its reading pushes out the first prompt's
    models["translate"].tokens.weight.data.mul_(-1)
    explorer.controls["prompt"].value = "Tom has a blue car."
    assert explorer.state["samples"] == current_samples(explorer, models) != before


# After an eighth hostile pass: what samples() and reading() return is the caller's.

PROMPT = ("translate", "Tom has a blue car.")
SAMPLING = (1.0, None, 0.9, 0)  # temperature, top_k, top_p, seed


def test_editing_what_samples_returns_leaves_the_explorers_samples_alone(explorer):
    """After s.append('extra') the figure showed 'zip() argument 2 is longer than argument 1'."""
    first = explorer.samples(*PROMPT, *SAMPLING)
    kept = list(first)
    first.append("extra")
    first[0] = "changed"
    assert explorer.samples(*PROMPT, *SAMPLING) == kept
    explorer.controls["seed"].value = 1
    explorer.controls["seed"].value = 0
    assert "error" not in explorer.state, explorer.state["error"]
    assert explorer.state["samples"] == kept


def test_editing_what_reading_returns_leaves_the_explorers_reading_alone(explorer):
    """r['logits'].zero_() zeroed the distribution shown; an edit of r['read'] was written from."""
    samples = explorer.samples(*PROMPT, *SAMPLING)
    found = explorer.reading(*PROMPT)
    kept = {key: found[key].clone() for key in ("ids", "logits", "attention")}
    for key in kept:
        found[key].zero_()
    found["tokens"].append("extra")
    found["read"].logits.zero_()
    found["read"].caches[0].keys.mul_(3)
    again = explorer.reading(*PROMPT)
    for key, value in kept.items():
        assert torch.equal(again[key], value), key
    assert "extra" not in again["tokens"]
    explorer.controls["seed"].value = 1
    explorer.controls["seed"].value = 0
    assert "error" not in explorer.state, explorer.state["error"]
    assert explorer.samples(*PROMPT, *SAMPLING) == samples == explorer.state["samples"]


@pytest.mark.parametrize(("top_k", "drawn"), [("off", 8001), (50, 50)])
def test_the_count_of_tokens_that_can_be_drawn_is_the_set_generate_draws_from(top_k, drawn):
    """At temperature 0.05 the count was taken from float32 probabilities, where a token 6
    below the likeliest underflows to 0 ('1 of 8,001 tokens can be drawn'), while generate
    draws from float64, where every token here keeps a mass above 0."""
    sharp = tiny(0)
    logits = torch.full((8001,), -30.0)
    logits[:60] = -6.0
    logits[0] = 0.0
    with torch.no_grad():  # every position's features are the first unit vector: these logits
        sharp.norm.weight.zero_()
        sharp.norm.bias.copy_(torch.eye(sharp.config.d_model)[0])
        sharp.output.weight[:, 0] = logits
    explorer = DecoderOnlyExplorer(models={"translate": sharp, "continue": tiny(1)})
    explorer.controls["top_p"].value = 1.0
    explorer.controls["top_k"].value = top_k
    explorer.controls["temperature"].value = 0.05
    read = explorer.reading("translate", explorer.controls["prompt"].value)["logits"]
    assert int((next_token_probabilities(read, 0.05) > 0).sum()) == 1  # float32
    assert bool((next_token_probabilities(read.double(), 0.05) > 0).all())
    assert explorer.state["kept"] == drawn
    assert f"next token: {drawn:,} of 8,001 tokens" in explorer._distribution_ax.title.get_text()
    assert explorer.state["sampled_from"].gt(0).all()  # the ten bars: none is called cut
