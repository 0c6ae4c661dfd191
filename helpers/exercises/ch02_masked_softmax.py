"""Chapter 02's exercises: masked softmax.

1. check_masked_softmax: masked softmax from a boolean mask of any broadcastable shape, for
   scores with any leading axes, scores that already hold -inf, fully masked rows and float16.
2. check_masked_mean: the mean of each example's valid positions in a padded batch, whatever
   the pads hold.
3. check_top_k_softmax: a softmax over the k highest-scoring valid keys of each row only.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers import attention
from helpers.attention import masked_softmax
from helpers.exercises.framework import exercise_checker, report, run_case

__all__ = ["check_masked_mean", "check_masked_softmax", "check_top_k_softmax"]

FORBIDDEN = {
    "helpers.attention.masked_softmax": masked_softmax,
    "helpers.attention._masked_softmax (masked_softmax's computation)": attention._masked_softmax,
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
}


def _hint_when(
    failures: list[str],
    before: int,
    hint: str,
    when: tuple[str, ...],
    mistakes: dict | None = None,
) -> None:
    """Add the case's hint to the failure it just caused, but only when the failure is the one
    the hint explains (its message contains one of `when`: e.g. the index of the row the case
    is about, "NaN", or "raised"), and not when the failure already names a mistake."""
    if not hint or len(failures) <= before:
        return
    if any(f"({diagnosis})" in failures[-1] for diagnosis in mistakes or {}):
        return  # the named mistake is the whole story
    if any(words in failures[-1] for words in when):
        failures[-1] += f" ({hint})"


INVERTED = "the mask is inverted: True means *may attend*, so fill where the mask is False (~mask)"


def _inverted(scores: torch.Tensor, mask: torch.Tensor) -> dict:
    """What an inverted mask returns, {diagnosis: weights}: with a plain softmax after the fill,
    as a learner would write it (NaN in a row that has no key left), and with the right recipe
    (zeros there; named last, so that it wins where the two agree). Nothing where the
    inverted mask would allow nothing at all (every answer of zeros would match it)."""
    if mask.all() or not mask.any():
        return {}
    plain = torch.softmax(scores.float().masked_fill(mask, float("-inf")), dim=-1)
    return {
        f"{INVERTED}; a row left with no key then comes out NaN, not zeros": plain.to(scores.dtype),
        INVERTED: masked_softmax(scores, mask=~mask),
    }


@exercise_checker
def check_masked_softmax(learner_masked_softmax: Callable) -> bool:
    """learner_masked_softmax(scores, mask) -> weights, with mask boolean (True = may attend)
    and broadcastable to scores (..., q, k), without calling helpers.attention.masked_softmax:
    values, gradients, and the caller's scores left as they were."""
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 3, 5, generator=generator)
    key_mask = (torch.arange(5) < torch.tensor([2, 5])[:, None])[:, None, :]  # (2, 1, 5)
    per_query = torch.rand(2, 3, 5, generator=generator) < 0.5  # (2, 3, 5)
    per_query[..., 1] = True  # every row keeps a key
    empty_row = key_mask.expand(2, 3, 5).clone()
    empty_row[0, 1] = False  # query 1 of example 0 may attend to nothing
    heads = torch.randn(2, 2, 4, 4, generator=generator)  # (B, h, q, k)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()  # (q, k), shared by batch and heads
    with_inf = scores.clone()
    with_inf[1, 0, :2] = float("-inf")  # an earlier additive mask hid two keys ...
    with_inf[1, 2, :] = float("-inf")  # ... and every key of one row
    cases = [  # (name, scores, mask, mistakes, hint, when the hint applies)
        ("a key mask (B, 1, k)", scores, key_mask, {}, "", ()),
        ("a different mask for every query (B, q, k)", scores, per_query, {}, "", ()),
        ("a causal mask (q, k) for scores (B, heads, q, k)", heads, causal, {}, "", ()),
        (
            "large scores",
            scores * 1000,
            key_mask,
            {},
            "e^1000 overflows: subtract the row maximum (torch.softmax does)",
            ("NaN", "inf"),
        ),
        (
            "a fully masked row",
            scores,
            empty_row,
            {},
            "a row with no allowed key must be all zeros, not NaN and not uniform",
            ("index (0, 1, ",),
        ),
        (
            "scores that already hold -inf",
            with_inf,
            torch.ones(1, 1, 5, dtype=torch.bool),
            {},
            "a score of -inf allows nothing either, so a row whose scores are all -inf has no "
            "key: zeros, not NaN",
            ("index (1, 2, ",),
        ),
        (
            "float16 scores",
            scores.half(),
            key_mask,
            {},
            "fill with -inf, which every dtype has: -1e9 does not fit in float16",
            ("raised",),
        ),
    ]
    failures, passed = [], 0
    for name, case_scores, mask, mistakes, hint, when in cases:
        mistakes = {**_inverted(case_scores, mask), **mistakes}
        before = len(failures)
        passed += run_case(
            name,
            learner_masked_softmax,
            (case_scores, mask),
            lambda s, m: masked_softmax(s, mask=m),
            failures,
            atol=2e-3,
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=("scores", "mask"),
        )
        _hint_when(failures, before, hint, when, mistakes)
    return report(failures, passed)


def _masked_mean(x: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    keep = torch.arange(x.shape[1]) < valid_lens[:, None]  # (B, n)
    total = x.masked_fill(~keep[..., None], 0.0).sum(dim=1)  # (B, d)
    return total / valid_lens.clamp(min=1)[:, None].to(x.dtype)  # (B, d)


def _mean_mistakes(x: torch.Tensor, valid_lens: torch.Tensor) -> dict:
    """What typical wrong answers return for this batch: {diagnosis: their means}, leaving
    out those with an inf or NaN in them (a pad's inf swamps them all alike, so the one the
    learner made could not be told apart)."""
    n = x.shape[1]
    keep = torch.arange(n) < valid_lens[:, None]  # (B, n)
    one_more = torch.arange(n) <= valid_lens[:, None]  # (B, n): one pad too many
    count = valid_lens.clamp(min=1)[:, None].to(x.dtype)  # (B, 1)
    mistakes = {
        "averages the pads too: only the first valid_len positions of each example count": (
            x.mean(dim=1)
        ),
        "divides by n, the padded length: divide the sum of the valid positions by their "
        "number, the valid length": torch.where(keep[..., None], x, 0.0).sum(1) / n,
        "counts one position too many (<= where < is meant): position j is valid when "
        "j < valid_len": torch.where(one_more[..., None], x, 0.0).sum(1) / count,
    }
    return {diagnosis: mean for diagnosis, mean in mistakes.items() if mean.isfinite().all()}


@exercise_checker
def check_masked_mean(learner_masked_mean: Callable) -> bool:
    """learner_masked_mean(x, valid_lens) -> (B, d): the mean of x[b, :valid_lens[b]] for x of
    shape (B, n, d), zeros for a valid length of 0, whatever the pads hold (even inf), without
    changing x."""
    generator = torch.Generator().manual_seed(22)
    x = torch.randn(3, 5, 4, generator=generator)  # (B, n, d)
    lens = torch.tensor([3, 5, 1])
    garbage = x.clone()
    garbage[0, 3:] = float("inf")
    garbage[2, 1:] = float("-inf")
    cases = [  # (name, x, valid_lens, hints: (hint, when it applies) pairs)
        ("valid lengths 3, 5, 1", x, lens, ()),
        (
            "a valid length of 0",
            x,
            torch.tensor([0, 2, 5]),
            (
                (
                    "an example with no valid position has no mean: return zeros for it, "
                    "not 0/0 = NaN",
                    ("NaN at index (0,", "index (0, 0) got nan"),
                ),
            ),
        ),
        (
            "pads that hold inf and -inf",
            garbage,
            lens,
            (
                (
                    "a pad may hold anything, and 0 × inf is NaN: fill the pads with 0 "
                    "(masked_fill or torch.where) instead of multiplying them by a 0/1 mask",
                    ("NaN",),
                ),
                (
                    "a pad's value reached the mean: only the first valid_len positions of "
                    "each example may count",
                    ("got inf", "got -inf"),
                ),
            ),
        ),
        ("float64 values", x.double(), lens, ()),
    ]
    failures, passed = [], 0
    for name, case_x, case_lens, hints in cases:
        mistakes = _mean_mistakes(case_x, case_lens)
        before = len(failures)
        passed += run_case(
            name,
            learner_masked_mean,
            (case_x, case_lens),
            _masked_mean,
            failures,
            mistakes=mistakes,
            names=("x", "valid_lens"),
        )
        for hint, when in hints:  # their `when`s exclude each other: "NaN at", "got inf"
            _hint_when(failures, before, hint, when, mistakes)
    return report(failures, passed)


def _top_k_softmax(scores: torch.Tensor, valid_lens: torch.Tensor, k: int) -> torch.Tensor:
    n = scores.shape[-1]
    valid = torch.arange(n) < valid_lens[:, None, None]  # (B, 1, n)
    ranked = scores.masked_fill(~valid, float("-inf"))  # (B, q, n)
    kth = ranked.topk(min(k, n), dim=-1).values[..., -1:]  # (B, q, 1)
    return masked_softmax(scores, mask=valid & (ranked >= kth))


@exercise_checker
def check_top_k_softmax(learner_top_k_softmax: Callable) -> bool:
    """learner_top_k_softmax(scores, valid_lens, k) -> weights (B, q, n): the masked softmax
    of each row over its k highest-scoring valid keys only (key j valid when j < valid_lens[b]);
    a row with k or fewer valid keys keeps them all, and one with none is all zeros."""
    generator = torch.Generator().manual_seed(32)
    scores = torch.randn(2, 3, 6, generator=generator)  # (B, q, n)
    every_key = torch.tensor([6, 6])
    lens = torch.tensor([4, 6])
    valid = torch.arange(6) < lens[:, None, None]
    among_all = torch.where(scores >= scores.topk(3, dim=-1).values[..., -1:], scores, -torch.inf)
    mistakes = {
        "keeps every valid key: only the k highest scores of each row may get weight": (
            masked_softmax(scores, valid_lens=lens)
        ),
        "picks the top k among all keys, pads included, so a row can keep fewer than k: "
        "mask the pads first, then pick the top k": masked_softmax(among_all, mask=valid),
        "keeps only k - 1 keys: the key with the k-th highest score stays (>=, not >)": (
            _top_k_softmax(scores, lens, 2)
        ),
    }
    cases = [  # (name, valid_lens, k, mistakes, hint, when the hint applies)
        ("k = 2, every key valid", every_key, 2, {}, "", ()),
        ("k = 3 among valid lengths 4 and 6", lens, 3, mistakes, "", ()),
        ("k = 1: all weight on the best valid key", lens, 1, {}, "", ()),
        (
            "k = 4, valid lengths 2 and 6",
            torch.tensor([2, 6]),
            4,
            {},
            "a row with k or fewer valid keys keeps all of them",
            ("index (0, ",),
        ),
        (
            "a valid length of 0",
            torch.tensor([0, 5]),
            2,
            {},
            "a row with no valid key must be all zeros, not NaN",
            ("index (0, ",),
        ),
        (
            "k = 10, more than the 6 keys",
            lens,
            10,
            {},
            "when k is larger than the number of keys, every valid key stays (torch.topk "
            "refuses k > n: use min(k, n))",
            ("raised",),
        ),
    ]
    failures, passed = [], 0
    for name, case_lens, k, case_mistakes, hint, when in cases:
        before = len(failures)
        passed += run_case(
            name,
            learner_top_k_softmax,
            (scores, case_lens, k),
            _top_k_softmax,
            failures,
            mistakes=case_mistakes,
            names=("scores", "valid_lens", "k"),
        )
        _hint_when(failures, before, hint, when)
    return report(failures, passed)
