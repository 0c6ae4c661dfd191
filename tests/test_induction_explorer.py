"""Chapter 13's explorer after a hostile pass: typed numbers of any length, arguments that are
not what they should be, training dicts that no training run returns, and torch's random numbers
left alone by every control. (Its drawing is tested in test_widgets.py, on the same tiny
models.)"""

import copy
import math
import warnings

import numpy as np
import pytest
import torch
from test_widgets import tiny_induction_training
from traitlets import TraitError

from helpers.induction import Recipe
from helpers.widgets import InductionExplorer
from helpers.widgets.ch13_induction_heads import DEFAULT_TOKENS, find_repeat, parse_tokens

HUGE = 10**5000  # more digits than Python prints


@pytest.fixture
def explorer():
    return InductionExplorer(sequence="typed", training=tiny_induction_training())


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0007 5", [7, 5]),
        ("0" * 5000 + "7 5", [7, 5]),
        ("0" * 4301 + " 3", [0, 3]),
        ("00 00", [0, 0]),
        ("0" * 10**6 + "1 2", [1, 2]),
        ("5\u00a017,,42", [5, 17, 42]),
        ("63 0", [63, 0]),
    ],
    ids=["0007", "5000 zeros", "4301 zeros", "00", "a million zeros", "nbsp and commas", "63"],
)
def test_typed_numbers_read_leading_zeros_however_many(explorer, text, ids):
    explorer.controls["tokens"].value = text
    assert "error" not in explorer.state and explorer.state["ids"] == ids


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("9" * 5000 + " 5", "token 999999... (5000 digits) is outside the vocabulary 0..63"),
        ("1" + "0" * 5000 + " 5", "token 100000... (5001 digits) is outside the vocabulary"),
        ("64" + "0" * 4400 + " 1", "token 640000... (4402 digits) is outside the vocabulary"),
        ("0" * 5000 + "64 1", "token 64 is outside the vocabulary 0..63"),
        ("9" * 10**5, "token 999999... (100000 digits) is outside the vocabulary 0..63"),
        ("0" * 4301, "one token has no next token to predict: type at least 2"),
        ("5 0x10", "'0x10' is not a token number: type token numbers 0..63 separated by spaces"),
        ("5 1e3", "'1e3' is not a token number"),
        ("\uff15 \uff16", "'\\uff15' is not a token number"),  # full-width: escaped, as
        ("\u0663 \u0664", "'\\u0663' is not a token number"),  # the font has no glyphs
        ("5 +6", "'+6' is not a token number"),
        ("5 5_000", "'5_000' is not a token number"),
        ("1 " * 100000, "100000 tokens do not fit in the context of 48: type at most 48"),
    ],
    ids=[
        "5000 nines",
        "1 and 5000 zeros",
        "64 and 4400 zeros",
        "zeros then 64",
        "100000 nines",
        "4301 zeros alone",
        "hex",
        "exponent",
        "full-width",
        "Arabic-Indic",
        "plus sign",
        "underscore",
        "100000 tokens",
    ],
)
def test_typed_numbers_that_cannot_be_read_get_a_message_naming_the_vocabulary(
    explorer, text, message
):
    explorer.controls["tokens"].value = text
    error = explorer.state["error"]
    assert message in error and "Exceeds the limit" not in error and len(error) < 200, error
    assert message in explorer._log_ax.get_title()


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ("abc", "'abc' is not a token number: type token numbers 0..63 separated by spaces"),
        ("", "no tokens: type token numbers 0..63"),
        ("600 1", "token 600 is outside the vocabulary 0..63"),
        ("1", "one token has no next token to predict: type at least 2"),
    ],
    ids=["letters", "empty", "600", "one token"],
)
def test_typed_tokens_the_explorer_cannot_read_are_refused_at_the_call(tokens, message):
    """They were taken, and the error showed only in the figure."""
    with pytest.raises(ValueError) as raised:
        InductionExplorer(sequence="typed", tokens=tokens, training=tiny_induction_training())
    assert message in str(raised.value), str(raised.value)


def test_parse_tokens_reads_what_the_explorer_reads():
    assert parse_tokens("0" * 5000 + "12 000", 64, 48).tolist() == [[12, 0]]
    with pytest.raises(ValueError, match=r"token 123456\.\.\. \(5000 digits\) is outside"):
        parse_tokens("1 " + "1234567890" * 500, 64, 48)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"model": ["two-layer"]}, "model must be one of ['one-layer', 'two-layer'], got ['two-"),
        ({"model": {"two-layer": 1}}, "model must be one of ['one-layer', 'two-layer'], got {'"),
        ({"step": HUGE}, "step an int too large to print is not a stored snapshot"),
        ({"layer": HUGE}, "layer an int too large to print is out of range for the two-layer"),
        ({"head": -HUGE}, "head must be a whole number >= 0, got an int too large to print"),
        ({"seed": HUGE}, "seed must be below 2^32, got an int too large to print"),
        ({"seed": 2**32}, "seed must be below 2^32, got 4294967296: torch's cpu generator reads"),
    ],
    ids=["model list", "model dict", "step", "layer", "head", "seed", "seed 2^32"],
)
def test_the_explorer_names_arguments_that_are_not_what_they_should_be(arguments, message):
    with pytest.raises(ValueError) as raised:
        InductionExplorer(training=tiny_induction_training(), **arguments)
    assert message in str(raised.value)


def _snapshot_with_nan(training):
    snapshot = {key: value.clone() for key, value in training["snapshots"]["two-layer"][10].items()}
    snapshot["tokens.weight"][0, 0] = float("nan")
    training["snapshots"]["two-layer"][10] = snapshot


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda t: t["logs"]["two-layer"]["second_copy_loss"].__setitem__(1, float("nan")),
            "training['logs']['two-layer']: its log's second_copy_loss should hold finite numbers",
        ),
        (
            lambda t: t["logs"]["two-layer"]["second_copy_loss"].__setitem__(1, float("inf")),
            "its log's second_copy_loss should hold finite numbers only, each in 0..inf",
        ),
        (
            lambda t: t["logs"]["two-layer"]["second_copy_loss"].__setitem__(1, "x"),
            "its log's second_copy_loss should hold finite numbers only",
        ),
        (
            lambda t: t["logs"]["two-layer"]["induction"].__setitem__((2, 1, 0), float("nan")),
            "its log's induction scores should be means of attention weights, each in 0..1",
        ),
        (
            lambda t: t["logs"]["one-layer"]["step"].reverse(),
            "its log's step should be a list of training steps, whole numbers >= 0 in increasing",
        ),
        (
            _snapshot_with_nan,
            "training['snapshots']['two-layer'] snapshot 10: its weight tokens.weight holds NaN",
        ),
        (
            lambda t: t["snapshots"]["one-layer"].__setitem__("10", t["snapshots"]["one-layer"][0]),
            "its snapshots' steps should be the 2 steps train_model writes, every multiple",
        ),
    ],
    ids=[
        "NaN loss",
        "inf loss",
        "text loss",
        "NaN score",
        "steps backwards",
        "NaN snapshot",
        "step as text",
    ],
)
def test_a_training_dict_that_no_training_run_returns_is_refused_by_name(change, message):
    training = copy.deepcopy(tiny_induction_training())
    change(training)
    with pytest.raises(ValueError) as raised:
        InductionExplorer(training=training)
    assert message in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("control", "value"),
    [
        ("step", 0),
        ("model", "one-layer"),
        ("tokens", "5 6 5 6"),
        ("seed", 3),
        ("layer", 0),
        ("head", 0),
        ("sequence", "repeat"),
    ],
)
def test_every_control_leaves_torchs_random_numbers_alone(explorer, control, value):
    """Moving the step slider rebuilt a model through its constructor, drawing its initial
    weights from torch's global generator."""
    explorer.controls["sequence"].value = "repeat"
    before = torch.random.get_rng_state()
    explorer.controls[control].value = value
    assert torch.equal(torch.random.get_rng_state(), before)


def test_building_the_explorer_leaves_torchs_random_numbers_alone():
    training = tiny_induction_training()
    before = torch.random.get_rng_state()
    InductionExplorer(training=training, step=0)
    assert torch.equal(torch.random.get_rng_state(), before)


# Regressions from a second hostile pass


def _changed_training(change):
    training = copy.deepcopy(tiny_induction_training())
    change(training)
    return training


@pytest.mark.parametrize(
    ("change", "error", "words"),
    [
        (
            lambda t: t["logs"]["two-layer"]["step"].__setitem__(-1, 10**400),
            ValueError,
            "its log's steps should be the 3 steps train_model writes, every multiple of the",
        ),
        (
            lambda t: t["snapshots"]["two-layer"].__setitem__(
                10**400, t["snapshots"]["two-layer"][0]
            ),
            ValueError,
            "every multiple of the recipe's snapshot_every (10) up to its steps (10): 0, 10;",
        ),
        (
            lambda t: t["logs"]["two-layer"].__setitem__("second_copy_loss", [1.7e308] * 3),
            ValueError,
            "second_copy_loss reaches 1.7e+308: the explorer draws losses up to 1e+100 nats",
        ),
        (
            lambda t: t.__setitem__("recipe", None),
            TypeError,
            "training['recipe'] must be a Recipe, got NoneType",
        ),
        (
            lambda t: t.__setitem__("recipe", Recipe(d_model=16, steps=10, log_every=5)),
            ValueError,
            "training['models']['one-layer'] must be the model training['recipe'] builds",
        ),
        (
            lambda t: t.__setitem__(
                "recipe", Recipe(context_length=1000, vocab_size=1000, batch_size=1, eval_batch=1)
            ),
            ValueError,
            "the explorer draws contexts of at most 256 positions (a map of context x context "
            "cells), got training['recipe'].context_length 1000",
        ),
    ],
    ids=[
        "log step 10^400",
        "snapshot 10^400",
        "loss 1.7e308",
        "no recipe",
        "other recipe",
        "context",
    ],
)
def test_a_training_dict_the_explorer_cannot_draw_is_refused_by_name(change, error, words):
    """10**400 raised OverflowError, losses of 1.7e308 numpy's 'Singular matrix', and a context
    of 100,000 'Unable to allocate 74.5 GiB'."""
    with pytest.raises(error) as raised:
        InductionExplorer(training=_changed_training(change))
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda e: e.snapshot("two-layer", 12345), "step 12345 is not a stored snapshot of the"),
        (
            lambda e: e.steps("three"),
            "model must be one of ['one-layer', 'two-layer'], got 'three'",
        ),
        (
            lambda e: e.draw("two-layer", 10, 5, 0, "repeat", 0, 24, 0, ""),
            "layer 5 is out of range for the two-layer model: the model has 2 layers, 0..1",
        ),
        (
            lambda e: e.draw("two-layer", 10, 0, 2, "repeat", 0, 24, 0, ""),
            "head 2 is out of range for the two-layer model: each layer has 2 heads, 0..1",
        ),
        (lambda e: e.draw("two-layer", 7, 0, 0, "repeat", 0, 24, 0, ""), "step 7 is not a stored"),
        (lambda e: e.snapshot("two-layer", None), "step must be a whole number >= 0, got None"),
        (
            lambda e: e.sequence_ids("repeat", 0, "", 64, 10),
            "a block of 24 at start 0 and its copy do not fit in the context of 10",
        ),
        (
            lambda e: e.sequence_ids("repeat", 0, "", 64, 0),
            "context_length must be a whole number >= 1, got 0",
        ),
        (
            lambda e: e.sequence_ids("repeat", 0, "", 64, "48"),
            "context_length must be a whole number >= 1, got '48'",
        ),
        (
            lambda e: e.sequence_ids("repeat", 0, "", 10**8, 48),
            "placed_repeats draws each row's different tokens from a random order of the whole "
            "vocabulary, at most 2^20 = 1,048,576 tokens (vocab_size)",
        ),
        (
            lambda e: e.sequence_ids("repeat", 0, "", 512, 1000),
            "the context (1000) must be at most vocab_size (512) for a repeat among tokens that "
            "all differ",
        ),
        (
            lambda e: e.sequence_ids("repeat", 0, "", 512, 10**5000),
            "the context (an int too large to print) must be at most vocab_size (512)",
        ),
    ],
    ids=[
        "snapshot step",
        "steps model",
        "draw layer",
        "draw head",
        "draw step",
        "snapshot None",
        "repeat in a context of 10",
        "repeat in a context of 0",
        "repeat in a context of '48'",
        "repeat in a vocabulary of 10^8",
        "repeat in a context beyond the vocabulary",
        "repeat in a context too large to print",
    ],
)
def test_the_explorers_methods_name_what_they_do_not_hold(explorer, call, words):
    """KeyError and IndexError came out of snapshot, steps and draw."""
    with pytest.raises(ValueError) as raised:
        call(explorer)
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("ids", "words"),
    [
        (torch.tensor([1, 2, 1, 2]), "ids must be (1, n), one sequence, got shape (4,)"),
        (torch.tensor([[1, 2, 1, 2]] * 2), "ids must be (1, n), one sequence, got shape (2, 4)"),
        ([[1, 2, 1, 2]], "ids must be a torch.Tensor (1, n), one sequence, got list"),
        (
            torch.tensor([[1.0, 2.0, 1.0, 2.0]]),
            "ids must hold integer token ids, got torch.float32",
        ),
        (torch.tensor([[True, False, True, False]]), "integer token ids, got torch.bool"),
        (torch.full((1, 4), math.nan), "ids must hold integer token ids, got torch.float32"),
        (torch.zeros(1, 4, dtype=torch.int64, device="meta"), "ids is on the meta device"),
    ],
    ids=["1-d", "two rows", "list", "floats", "bools", "NaN", "meta"],
)
def test_find_repeat_names_ids_that_are_not_one_sequence(ids, words):
    """Float and bool ids were read as a block and its copy, an all-NaN row as none, and a
    meta tensor reached torch's aten::equal."""
    with pytest.raises((TypeError, ValueError)) as raised:
        find_repeat(ids)
    assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize(
    ("vocab_size", "context_length", "words"),
    [
        (HUGE, 48, "vocab_size must be at most 2^63 (int64 ids), got an int too large to print"),
        (0, 48, "vocab_size must be a whole number >= 1, got 0"),
        (64, 0, "context_length must be a whole number >= 1, got 0"),
    ],
    ids=["vocabulary 10^5000", "vocabulary 0", "context 0"],
)
def test_parse_tokens_names_sizes_that_are_not_a_vocabulary_or_a_context(
    vocab_size, context_length, words
):
    """10**5000 raised Python's 4300-digit error, and 0 spoke of 'the vocabulary 0..-1'."""
    with pytest.raises(ValueError) as raised:
        parse_tokens("5 17", vocab_size, context_length)
    assert words in str(raised.value), str(raised.value)


# Regressions from a third hostile pass


def test_a_model_unset_from_code_asks_for_a_value(explorer):
    """follow() looked the unset model up: "KeyError: None"."""
    explorer.controls["model"].value = None
    assert explorer.state["error"] == "choose a value for model"
    explorer.controls["model"].value = "one-layer"
    assert "error" not in explorer.state and explorer.state["model"] == "one-layer"


@pytest.mark.parametrize("sequence", ["random", None, 0, "REPEAT"])
def test_a_sequence_that_is_neither_repeat_nor_typed_is_named(explorer, sequence):
    """Anything but "repeat" was read as typed tokens."""
    message = "sequence must be one of ['repeat', 'typed'], got "
    explorer.draw(**{**explorer.values(), "sequence": sequence})
    assert explorer.state["error"].startswith(message), explorer.state["error"]
    with pytest.raises(ValueError) as raised:
        explorer.sequence_ids(sequence, 0, "1 2", 64, 48)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("ids", "words"),
    [
        (torch.tensor([1, 2]), "ids must be (1, n), got shape (2,)"),
        (torch.tensor([[1]]), "ids must be (1, n), one sequence of 2..48 tokens, got shape (1, 1)"),
        (torch.tensor([[1, 2]] * 2), "one sequence of 2..48 tokens, got shape (2, 2)"),
        (torch.ones(1, 49, dtype=torch.long), "2..48 tokens, got shape (1, 49)"),
        (torch.tensor([[1, 64]]), "outside the vocabulary 0..63"),
        (torch.tensor([[1.0, 2.0]]), "ids must hold integer token ids, got torch.float32"),
    ],
    ids=["one axis", "one token", "two rows", "49 tokens", "id 64", "floats"],
)
def test_reading_names_ids_it_cannot_read(explorer, ids, words):
    """One axis raised "'int' object is not iterable", and one token returned no losses."""
    with pytest.raises(ValueError) as raised:
        explorer.reading("two-layer", explorer.values()["step"], ids)
    assert words in str(raised.value), str(raised.value)


# Regressions from a fourth hostile pass


@pytest.mark.parametrize("unset", [["step"], ["layer"], ["head"], ["step", "layer", "head"]])
def test_draw_asks_for_a_step_layer_or_head_left_unset(explorer, unset):
    """draw(..., None, None, ...) drew the constructor's defaults: the last step, the last
    layer, the best induction head."""
    with pytest.raises(ValueError, match=f"^choose a value for {', '.join(unset)}$"):
        explorer.draw(**{**explorer.values(), **dict.fromkeys(unset)})


def test_reading_takes_int32_ids_as_its_check_does(explorer):
    """int32 ids passed the check, then cross_entropy refused its int targets."""
    step = explorer.values()["step"]
    ids = torch.tensor([[1, 2, 1, 2]])
    found = explorer.reading("two-layer", step, ids.int())
    expected = explorer.reading("two-layer", step, ids)
    assert torch.equal(found["losses"], expected["losses"])


# Regressions from a fifth hostile pass


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("seed", 3.0, "seed (repeat) must be a whole number; got 3.0"),
        ("seed", np.float64(3.0), "seed (repeat) must be a whole number; got np.float64(3.0)"),
        ("seed", np.float32(3.0), "seed (repeat) must be a whole number; got np.float32(3.0)"),
        ("tokens", b"5 17", "typed tokens must be text (a str); got b'5 17'"),
    ],
)
def test_a_control_refuses_what_it_would_convert(explorer, name, value, words):
    """3.0 became the seed 3, and b'5 17' was decoded into typed tokens."""
    from traitlets import TraitError

    before = explorer.values()
    with pytest.raises(TraitError) as raised:
        explorer.controls[name].value = value
    assert str(raised.value) == words
    assert explorer.values() == before


@pytest.mark.parametrize(
    ("name", "value"),
    [("step", np.int64(0)), ("layer", np.int64(0)), ("head", np.int32(0)), ("seed", np.int64(7))],
)
def test_a_control_takes_numpys_whole_numbers_as_the_constructor_does(explorer, name, value):
    """'training step must be one of 0, 10; got np.int64(0)' contradicted itself."""
    explorer.controls[name].value = value
    assert type(explorer.controls[name].value) is int and explorer.controls[name].value == value
    assert "error" not in explorer.state and explorer.state.get(name, value) == value


def _mixed_keys(key):
    def change(training):
        training[key] = {0: None, **training[key]}

    return change


@pytest.mark.parametrize("key", ["models", "snapshots", "logs"])
def test_a_training_dict_with_keys_of_mixed_types_is_named(key):
    """'<' not supported between instances of 'int' and 'str', while building the message."""
    training = tiny_induction_training()
    _mixed_keys(key)(training)
    with pytest.raises(ValueError) as raised:
        InductionExplorer(training=training)
    assert f"training[{key!r}] must name ['one-layer', 'two-layer'], found [0, 'one-layer'" in str(
        raised.value
    )


def test_a_snapshot_whose_tied_weights_differ_is_refused():
    """Its output.weight overwrote the embedding it is tied to, and the explorer drew it."""
    training = tiny_induction_training()
    snapshot = training["snapshots"]["two-layer"][10]
    snapshot["output.weight"] = snapshot["tokens.weight"] + 1.0
    with pytest.raises(ValueError) as raised:
        InductionExplorer(training=training)
    assert "snapshot 10: its weights tokens.weight and output.weight differ" in str(raised.value)


def test_a_log_of_second_copy_losses_all_zero_gets_an_axis_with_a_height():
    """matplotlib warned: 'Attempting to set identical low and high ylims'."""
    training = tiny_induction_training()
    for log in training["logs"].values():
        log["second_copy_loss"] = [0.0] * len(log["step"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explorer = InductionExplorer(training=training)
    low, high = explorer._log_ax.get_ylim()
    assert low == 0 and high == pytest.approx(math.log(64))


@pytest.mark.parametrize(
    ("tokens", "found"),
    [
        ([5, 9, 12, 5, 9, 12], (0, 3)),
        ([1, 2, 5, 9, 12, 5, 9, 12, 7], (2, 3)),
        ([5, 17, 42, 5, 17], None),  # a repeat after a gap: not a block followed by its copy
        ([3, 3, 3, 3], (0, 2)),
        ([1, 2, 1, 2, 8, 4, 5, 6, 4, 5, 6], (5, 3)),  # the longest wins
        ([7, 7], None),  # a block of one token
        ([], None),
    ],
)
def test_find_repeat_finds_the_longest_block_followed_at_once_by_its_copy(tokens, found):
    assert find_repeat(torch.tensor([tokens], dtype=torch.int64).reshape(1, -1)) == found


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"length": 1}, "length must be a whole number >= 2"),
        ({"length": 25}, "a block of 25 at start 0 and its copy do not fit in the context of 48"),
        ({"length": 6, "start": 37}, "start + 2 x length must be at most 48"),
        ({"start": -1}, "start must be a whole number >= 0"),
        ({"start": 1.5}, "start must be a whole number"),
    ],
)
def test_the_explorer_names_a_repeat_that_does_not_fit(arguments, message):
    with pytest.raises(ValueError) as raised:
        InductionExplorer(training=tiny_induction_training(), **arguments)
    assert message in str(raised.value)


def test_find_repeat_refuses_a_sequence_longer_than_the_explorer_draws():
    """20,000 tokens searched in cubic time for about 15 minutes."""
    with pytest.raises(ValueError, match="at most 256 tokens"):
        find_repeat(torch.arange(20000)[None])


def test_a_training_of_a_short_context_gets_a_repeat_that_fits(tmp_path):
    """A valid load_training() dict of context 16 was refused for not holding a block of 24."""
    from helpers.induction import load_training, train_and_save

    recipe = Recipe(
        vocab_size=16, context_length=16, d_model=8, batch_size=2, steps=2, log_every=1,
        snapshot_every=1, eval_batch=2, eval_length=8, longest_block=8,
    )  # fmt: skip
    train_and_save(tmp_path / "tiny.pt", recipe)
    explorer = InductionExplorer(training=load_training(tmp_path / "tiny.pt"))
    assert "error" not in explorer.state and explorer.state["length"] == 8
    explorer = InductionExplorer(training=load_training(tmp_path / "tiny.pt"), length=2, start=5)
    assert (explorer.state["start"], explorer.state["length"]) == (5, 2)


def test_numpys_strings_choose_a_model_and_a_sequence():
    """np.str_('one-layer') passed the explorer's own check and was refused by its control."""
    explorer = InductionExplorer(
        training=tiny_induction_training(), model=np.str_("one-layer"), sequence=np.str_("typed")
    )
    assert explorer.values()["model"] == "one-layer" and "error" not in explorer.state


def test_a_seed_of_more_digits_than_python_prints_leaves_the_explorer_printable(explorer):
    """repr(explorer) raised Python's "Exceeds the limit (4300 digits)" (an eighth hostile
    pass); the seed box now refuses such a number by name (a seventeenth: a browser shows whole
    numbers past 2^53 rounded, and one of 5,000 digits cannot be sent to it at all)."""
    with pytest.raises(TraitError, match=r"seed \(repeat\) must be a whole number from -\(2\^53"):
        explorer.controls["seed"].value = HUGE
    shown = repr(explorer)
    assert shown.startswith("InductionExplorer(") and "seed=" in shown


# Regressions from a ninth hostile pass: what the explorer hands out is the caller's


def _flip_head(explorer):
    head = explorer.controls["head"].value
    explorer.controls["head"].value = 1 - head
    explorer.controls["head"].value = head


def _edit_reading(explorer):
    model, step = explorer.values()["model"], explorer.values()["step"]
    found = explorer.reading(model, step, torch.tensor([explorer.state["ids"]]))
    found["losses"].zero_()
    found["attention"].zero_()


def _edit_state(explorer):
    explorer.state["losses"].zero_()
    explorer.state["attention"].zero_()


def _edit_snapshot(explorer):
    model, step = explorer.values()["model"], explorer.values()["step"]
    with torch.no_grad():
        for weight in explorer.snapshot(model, step).parameters():
            weight.zero_()
    explorer.controls["tokens"].value = "1 2 3 1 2 3"  # a new reading, from the kept snapshot
    explorer.controls["tokens"].value = DEFAULT_TOKENS


@pytest.mark.parametrize(
    "edit", [_edit_reading, _edit_state, _edit_snapshot], ids=["reading", "state", "snapshot"]
)
def test_editing_what_the_explorer_hands_out_leaves_its_figures_alone(explorer, edit):
    """reading(), state and snapshot() handed out the explorer's own tensors and model: zeroed
    in place, they drew zero losses, an all-zero map, and every later loss ln vocab_size."""
    explorer.controls["tokens"].value = DEFAULT_TOKENS
    losses, attention = explorer.state["losses"].clone(), explorer.state["attention"].clone()
    edit(explorer)
    _flip_head(explorer)
    assert torch.equal(explorer.state["losses"], losses)
    assert torch.equal(explorer.state["attention"], attention)


# Regressions from a tenth hostile pass


def test_losses_beyond_the_loss_axis_are_named_in_the_view():
    """A snapshot of finite weights gave losses of 10^8 nats: the line was drawn off the 32-nat
    axis without a word."""
    training = tiny_induction_training()
    snapshot = training["snapshots"]["two-layer"][10]
    for name, weight in snapshot.items():
        snapshot[name] = weight * 1e4
    explorer = InductionExplorer(training=training, step=10)
    error = explorer.state["error"]
    assert error.startswith("losses reach ") and error.endswith(
        " nats at step 10, beyond the 32-nat loss axis"
    ), error
    assert error in explorer._log_ax.get_title()
    assert len(explorer._loss_line.get_xdata()) == 0


def test_a_length_past_the_context_set_from_code_is_put_back_and_named():
    """With the slider's max raised from code, follow() raised 'setting max < min' and the
    slider showed 500 while the figure drew 24."""
    explorer = InductionExplorer(training=tiny_induction_training())
    length = explorer.controls["length"]
    length.max = 1000
    length.value = 500
    assert length.value == explorer.state["length"] == 24 and length.max == 24
    words = "a block of 500 at start 0 and its copy do not fit in the context of 48"
    assert words in explorer.state["refused"] and words in explorer._log_ax.get_title()
    length.value = 20
    assert explorer.state["length"] == 20 and "refused" not in explorer.state


def test_a_start_past_the_room_left_set_from_code_is_put_back_and_named():
    """With the slider's max raised from code, a start past the room left moved silently to
    the slider's new end."""
    explorer = InductionExplorer(training=tiny_induction_training(), length=10, start=5)
    start = explorer.controls["start"]
    start.max = 100
    start.value = 40
    assert start.value == explorer.state["start"] == 5 and start.max == 28
    words = "a block of 10 at start 40 and its copy do not fit in the context of 48"
    assert words in explorer.state["refused"] and words in explorer._log_ax.get_title()


def test_a_longer_block_moves_the_start_in_without_a_word():
    explorer = InductionExplorer(training=tiny_induction_training(), length=10, start=20)
    explorer.controls["length"].value = 20
    assert (explorer.controls["start"].value, explorer.controls["start"].max) == (8, 8)
    assert (explorer.state["start"], explorer.state["length"]) == (8, 20)
    assert "refused" not in explorer.state
