"""Chapter 02's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.attention import masked_softmax as helper_masked_softmax
from helpers.exercises import check_masked_mean, check_masked_softmax, check_top_k_softmax
from solutions.ch02_masked_softmax import masked_mean, masked_softmax, top_k_softmax

CHECKERS = {
    "masked softmax": (check_masked_softmax, masked_softmax),
    "masked mean": (check_masked_mean, masked_mean),
    "top-k softmax": (check_top_k_softmax, top_k_softmax),
}


# 1. Masked softmax from a boolean mask


def fills_in_place(scores, mask):
    scores.masked_fill_(~mask, float("-inf"))  # changes the caller's scores
    return torch.softmax(scores, -1).nan_to_num(0.0)


def additive_inf_then_nan_to_num(scores, mask):
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    return torch.softmax(scores + additive, -1).nan_to_num(0.0)  # right values, NaN gradient


def uniform_empty_rows(scores, mask):
    return torch.softmax(scores.masked_fill(~mask, -1e4), -1)


def calls_the_helper(scores, mask):
    return helper_masked_softmax(scores, mask=mask)


def inverted_mask(scores, mask):
    return masked_softmax(scores, ~mask)


def inverted_mask_plain_softmax(scores, mask):  # NaN where the inverted mask leaves no key
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)


def forgets_the_inf_scores(scores, mask):  # the chapter's recipe, without `scores != -inf`
    row_has_key = mask.any(dim=-1, keepdim=True)
    filled = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_has_key, 0.0)
    weights = torch.softmax(filled.float(), dim=-1).to(scores.dtype)
    return weights.masked_fill(~row_has_key, 0.0)


# 2. Masked mean


def mean_over_every_position(x, valid_lens):
    return x.mean(dim=1)


def multiplies_by_the_mask(x, valid_lens):
    keep = (torch.arange(x.shape[1]) < valid_lens[:, None]).to(x.dtype)  # (B, n)
    return (x * keep[..., None]).sum(1) / valid_lens.clamp(min=1)[:, None]  # 0 * inf = NaN


def zero_over_zero(x, valid_lens):
    keep = torch.arange(x.shape[1]) < valid_lens[:, None]
    return torch.where(keep[..., None], x, 0.0).sum(1) / valid_lens[:, None]


def one_position_too_many(x, valid_lens):
    keep = torch.arange(x.shape[1]) <= valid_lens[:, None]  # off by one
    return torch.where(keep[..., None], x, 0.0).sum(1) / valid_lens.clamp(min=1)[:, None]


def zeroes_the_pads_in_place(x, valid_lens):
    keep = torch.arange(x.shape[1]) < valid_lens[:, None]
    x[~keep] = 0.0  # changes the caller's x
    return x.sum(1) / valid_lens.clamp(min=1)[:, None]


# 3. Top-k softmax


def top_k_before_masking(scores, valid_lens, k):
    valid = torch.arange(scores.shape[-1]) < valid_lens[:, None, None]
    kth = scores.topk(min(k, scores.shape[-1]), dim=-1).values[..., -1:]  # pads compete
    return masked_softmax(scores, valid & (scores >= kth))


def strictly_greater(scores, valid_lens, k):
    valid = torch.arange(scores.shape[-1]) < valid_lens[:, None, None]
    ranked = scores.masked_fill(~valid, float("-inf"))
    kth = ranked.topk(min(k, scores.shape[-1]), dim=-1).values[..., -1:]
    return masked_softmax(scores, valid & (ranked > kth))  # drops the k-th best


def k_not_clamped(scores, valid_lens, k):
    valid = torch.arange(scores.shape[-1]) < valid_lens[:, None, None]
    ranked = scores.masked_fill(~valid, float("-inf"))
    kth = ranked.topk(k, dim=-1).values[..., -1:]  # k > n raises
    return masked_softmax(scores, valid & (ranked >= kth))


WRONG = [
    ("masked softmax", fills_in_place, "changes its input `scores` in place"),
    ("masked softmax", additive_inf_then_nan_to_num, "the gradient with respect to `scores` is"),
    ("masked softmax", uniform_empty_rows, "a row with no allowed key must be all zeros"),
    ("masked softmax", calls_the_helper, "calls helpers.attention.masked_softmax"),
    ("masked softmax", inverted_mask, "the mask is inverted"),
    ("masked softmax", inverted_mask_plain_softmax, "the mask is inverted"),
    ("masked softmax", forgets_the_inf_scores, "a score of -inf allows nothing either"),
    ("masked mean", mean_over_every_position, "averages the pads too"),
    ("masked mean", multiplies_by_the_mask, "0 × inf is NaN"),
    ("masked mean", zero_over_zero, "return zeros for it, not 0/0 = NaN"),
    ("masked mean", one_position_too_many, "counts one position too many"),
    ("masked mean", zeroes_the_pads_in_place, "changes its input `x` in place"),
    ("top-k softmax", top_k_before_masking, "mask the pads first, then pick the top k"),
    ("top-k softmax", strictly_greater, "keeps only k - 1 keys"),
    ("top-k softmax", k_not_clamped, "use min(k, n)"),
]


def test_the_fill_in_place_answer_has_the_right_values_so_only_the_in_place_check_catches_it():
    scores = torch.randn(2, 3, 5)
    mask = (torch.arange(5) < torch.tensor([2, 5])[:, None])[:, None, :]
    expected = helper_masked_softmax(scores, mask=mask)
    torch.testing.assert_close(fills_in_place(scores.clone(), mask), expected)


def test_a_wrong_dtype_is_named(run_checker):
    verdict, out = run_checker(check_masked_softmax, lambda s, m: masked_softmax(s, m).double())
    assert (
        not verdict
        and "dtype torch.float64, expected torch.float32 (keep the input's dtype)" in out
    )


def test_a_checker_leaves_no_profiler_behind():
    import sys

    check_masked_softmax(masked_softmax)
    assert sys.getprofile() is None


def test_an_inverted_mask_is_named_in_every_case_it_fails_and_not_taken_for_overflow(
    run_checker,
):
    for answer in (inverted_mask, inverted_mask_plain_softmax):
        verdict, out = run_checker(check_masked_softmax, answer)
        failed = [line for line in out.splitlines() if line.startswith("  - ")]
        assert not verdict and "e^1000 overflows" not in out, out
        named = [line for line in failed if "the mask is inverted" in line]
        assert len(named) >= 4, out  # key mask, per query, causal, large scores, ...


def test_a_mean_hint_about_multiplying_by_a_mask_is_given_only_for_nan(run_checker):
    verdict, out = run_checker(check_masked_mean, one_position_too_many)
    assert not verdict and "0 × inf" not in out and "multiplying" not in out, out
    verdict, out = run_checker(check_masked_mean, multiplies_by_the_mask)
    assert not verdict and "0 × inf is NaN" in out, out
