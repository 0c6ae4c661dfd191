import pytest

from helpers.timing import median_seconds


def test_median_seconds_calls_warmup_plus_repeats_times_and_returns_a_median():
    calls = []
    seconds = median_seconds(lambda: calls.append(1), repeats=5, warmup=2)
    assert len(calls) == 7 and 0 <= seconds < 1


def test_median_seconds_refuses_no_repeats():
    with pytest.raises(ValueError, match="repeats must be a whole number >= 1, got 0"):
        median_seconds(lambda: None, repeats=0)
