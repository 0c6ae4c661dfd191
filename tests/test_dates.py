"""The date task: unambiguous formats, a fixed split, encodings, and the saved model."""

import datetime
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from helpers.dates import (
    BOS,
    DATE_MODEL,
    EOS,
    FORMATS,
    MAX_SOURCE_LENGTH,
    RECIPE,
    DateTask,
    all_dates,
    answer_problem,
    encode_sources,
    encode_targets,
    exact_match,
    load_date_model,
    normalise,
    ordinal,
    train_date_model,
    write_date,
)

WEIGHTS = Path(__file__).resolve().parents[1] / "data" / "date_transformer.pt"


def test_every_written_date_means_exactly_one_date():
    meaning = {}
    for date in all_dates():
        for name in FORMATS:
            text = write_date(date, name)
            assert meaning.setdefault(text, date) == date, (text, name)
            assert len(text) <= MAX_SOURCE_LENGTH


def test_formats_write_what_their_names_say():
    date = datetime.date(2015, 3, 3)
    for name in FORMATS:
        assert write_date(date, name) == name
    assert write_date(datetime.date(1999, 12, 22), "3 mar 15") == "22 dec 99"
    assert [ordinal(d) for d in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st",
    ]  # fmt: skip


def test_the_split_is_fixed_and_disjoint():
    task, again = DateTask(), DateTask()
    assert task.test == again.test and task.validation == again.validation
    assert len(task.test) == 2000 and len(task.validation) == 1000
    train = set(task.train_dates)
    assert not train & set(task.test_dates) and not train & set(task.validation_dates)
    assert len(train) + 3000 == len(all_dates())
    generator = torch.Generator().manual_seed(0)
    sources, targets = task.train_batch(16, generator)
    assert sources.shape[0] == 16 and targets.shape == (16, 12)
    assert (targets[:, 0] == BOS).all() and (targets[:, -1] == EOS).all()


def test_bad_text_gets_a_friendly_error():
    with pytest.raises(ValueError, match="unknown character.*'é'"):
        encode_sources(["3 févr 2015"])
    with pytest.raises(ValueError, match="the date is empty"):
        encode_sources(["   "])
    with pytest.raises(ValueError, match="at most 40 characters"):
        encode_sources(["3" * 41])
    assert encode_sources(["ab", "abcd"]).tolist()[0][2:] == [0, 0]
    assert encode_targets(["2015-03-03"]).shape == (1, 12)


def test_the_saved_weights_still_reach_99_percent():
    model, history = load_date_model(WEIGHTS)
    accuracy, errors = exact_match(model, DateTask().test)
    assert accuracy >= 0.99, errors[:10]
    assert len(history["loss"]) == history["recipe"]["steps"]


def test_the_recipe_trains_a_model_to_99_percent():
    """The claim of chapter 07, from scratch: about a minute on a 2-core CPU."""
    task = DateTask()
    model, history = train_date_model(task, progress=False)
    accuracy, errors = exact_match(model, task.test)
    print(f"trained in {history['seconds']:.1f} s: {accuracy:.2%} exact match")
    assert accuracy >= 0.99, errors[:10]


def test_training_settings_reach_the_model_or_are_refused():
    task = DateTask()
    config, recipe = replace(DATE_MODEL, norm_first=False), replace(RECIPE, steps=1)
    model, history = train_date_model(task, progress=False, config=config, recipe=recipe)
    assert model.config.norm_first is False and history["model_size"]["norm_first"] is False
    assert len(history["loss"]) == 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        replace(RECIPE, colour="red")


@pytest.fixture(scope="module")
def saved_model():
    return load_date_model(WEIGHTS)[0]


def test_every_correct_answer_is_accepted():
    """The checks on an answer never refuse the right reading of a date in any format."""
    for date in all_dates():
        for name in FORMATS:
            assert answer_problem(write_date(date, name), date.isoformat()) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("February 30, 2015", "'2015-02-30', which is not a calendar date"),
        ("03.13.2015", "'2015-13-03', which is not a calendar date"),
        ("7", "not a calendar date"),
        ("March 3, 2050", "years 1950 to 2049 only, not 2050"),
        ("March 3, 1949", "years 1950 to 2049 only, not 1949"),
        ("20500303", "not 2050"),
        ("Wednesday, September 23rd 1959", "does not fit the numbers 23, 1959"),
        ("Monday, March 3rd 2015", "2015-03-03, a Tuesday"),
    ],
)
def test_a_date_the_model_cannot_read_is_refused(saved_model, text, message):
    with pytest.raises(ValueError, match=f"cannot read.*{message}"):
        normalise(saved_model, [text])


def test_spaces_around_a_date_change_nothing(saved_model):
    assert normalise(saved_model, ["20150303 ", "  3 March   2015"]) == ["2015-03-03"] * 2


def test_bad_arguments_get_a_clear_error(saved_model):
    with pytest.raises(ValueError, match="at least one"):
        exact_match(saved_model, [])
    with pytest.raises(ValueError, match="non-empty list"):
        normalise(saved_model, "3 March 2015")
    with pytest.raises(ValueError, match="num_test must be a whole number >= 1, got -5"):
        DateTask(num_test=-5)
    with pytest.raises(ValueError, match="half of the 36525 dates"):
        DateTask(num_test=30000)


@pytest.mark.parametrize(
    "text",
    [
        "abcdefghij",
        "March",
        "the 3rd of March",
        "3 March two thousand",
        "March 2015",
        "3 Marhc 2015",
    ],
)
def test_text_that_does_not_write_a_whole_date_is_refused(saved_model, text):
    with pytest.raises(ValueError, match="a date needs a year, a month and a day"):
        normalise(saved_model, [text])


def test_all_number_dates_are_read_in_their_fixed_order():
    assert "fixed order (year, month, day)" in answer_problem("2015/13/3", "2015-03-13")
    assert "fixed order (day, month, year)" in answer_problem("13.13.2015", "2015-01-13")
    assert answer_problem("2015/3/13", "2015-03-13") is None
