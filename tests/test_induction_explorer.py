"""Chapter 13's explorer after a hostile pass: typed numbers of any length, arguments that are
not what they should be, training dicts that no training run returns, and torch's random numbers
left alone by every control. (Its drawing is tested in test_widgets.py, on the same tiny
models.)"""

import copy

import pytest
import torch
from test_widgets import tiny_induction_training

from helpers.widgets import InductionExplorer
from helpers.widgets.ch13_induction_heads import parse_tokens

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
        ("\uff15 \uff16", "'\uff15' is not a token number"),  # full-width digits
        ("\u0663 \u0664", "'\u0663' is not a token number"),  # Arabic-Indic digits
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


def test_parse_tokens_reads_what_the_explorer_reads():
    assert parse_tokens("0" * 5000 + "12 000", 64, 48).tolist() == [[12, 0]]
    with pytest.raises(ValueError, match=r"token 123456\.\.\. \(5000 digits\) is outside"):
        parse_tokens("1 " + "1234567890" * 500, 64, 48)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"model": ["two-layer"]}, "model must be one of ['one-layer', 'two-layer'], got ['two-"),
        ({"model": {"two-layer": 1}}, "model must be one of ['one-layer', 'two-layer'], got {'"),
        ({"step": HUGE}, "step a int too large to print is not a stored snapshot"),
        ({"layer": HUGE}, "layer a int too large to print is out of range for the two-layer"),
        ({"head": -HUGE}, "head must be a whole number >= 0, got a int too large to print"),
        ({"seed": HUGE}, "seed must be below 2^64 (a torch seed), got a int too large to print"),
    ],
    ids=["model list", "model dict", "step", "layer", "head", "seed"],
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
            "its log's induction scores should be floating-point means of attention weights",
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
            "its snapshots should be keyed by training step, found '10'",
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
