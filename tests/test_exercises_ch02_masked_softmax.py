"""Chapter 02's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.attention import masked_softmax as helper_masked_softmax
from helpers.exercises import check_masked_softmax
from solutions.ch02_masked_softmax import masked_softmax

CHECKERS = {
    "masked softmax": (check_masked_softmax, masked_softmax),
}


def fills_in_place(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = torch.arange(scores.shape[-1]) < lens
    scores.masked_fill_(~allowed, float("-inf"))  # changes the caller's scores
    return torch.softmax(scores, -1).nan_to_num(0.0)


def additive_inf_then_nan_to_num(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = torch.arange(scores.shape[-1]) < lens
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores + additive, -1).nan_to_num(0.0)  # right values, NaN gradient


def uniform_empty_rows(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = torch.arange(scores.shape[-1]) < lens
    return torch.softmax(scores.masked_fill(~allowed, -1e4), -1)


def calls_the_helper(scores, valid_lens):
    return helper_masked_softmax(scores, valid_lens)


WRONG = [
    ("masked softmax", fills_in_place, "changes its input `scores` in place"),
    ("masked softmax", additive_inf_then_nan_to_num, "the gradient with respect to `scores` is"),
    ("masked softmax", uniform_empty_rows, "a row with no allowed key must be all zeros"),
    ("masked softmax", calls_the_helper, "calls helpers.attention.masked_softmax"),
]


def test_the_fill_in_place_answer_has_the_right_values_so_only_the_in_place_check_catches_it():
    scores = torch.randn(2, 3, 5)
    lens = torch.tensor([2, 5])
    expected = helper_masked_softmax(scores, lens)
    torch.testing.assert_close(fills_in_place(scores.clone(), lens), expected)


def test_a_wrong_dtype_is_named(run_checker):
    verdict, out = run_checker(
        check_masked_softmax, lambda s, lens: masked_softmax(s, lens).double()
    )
    assert (
        not verdict
        and "dtype torch.float64, expected torch.float32 (keep the input's dtype)" in out
    )


def test_a_checker_leaves_no_profiler_behind():
    import sys

    check_masked_softmax(masked_softmax)
    assert sys.getprofile() is None
