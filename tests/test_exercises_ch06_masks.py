"""Chapter 06's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import torch

from helpers.attention import KeyValueCache, masked_softmax
from helpers.exercises import (
    check_cached_decoding_with_pads,
    check_cross_attention,
    check_sliding_window,
)
from helpers.masks import causal_padding_mask
from solutions.ch06_masks import cached_decoding_with_pads, cross_attention, sliding_window

CHECKERS = {
    "cross-attention": (check_cross_attention, cross_attention),
    "sliding window": (check_sliding_window, sliding_window),
    "cached decoding with pads": (check_cached_decoding_with_pads, cached_decoding_with_pads),
}


def cross_without_scaling(queries, memory, source_tokens, pad_id):
    return cross_attention(queries * math.sqrt(queries.shape[-1]), memory, source_tokens, pad_id)


def cross_reads_the_pads(queries, memory, source_tokens, pad_id):
    scores = queries @ memory.mT / math.sqrt(queries.shape[-1])
    return torch.softmax(scores, -1) @ memory


def cross_with_sdpa(queries, memory, source_tokens, pad_id):
    mask = (source_tokens != pad_id)[:, None, :]
    return torch.nn.functional.scaled_dot_product_attention(queries, memory, memory, mask)


def cross_with_masked_softmax(queries, memory, source_tokens, pad_id):
    scores = queries @ memory.mT / math.sqrt(queries.shape[-1])
    return masked_softmax(scores, mask=(source_tokens != pad_id)[:, None, :]) @ memory


def cross_minus_inf_then_softmax(queries, memory, source_tokens, pad_id):
    scores = queries @ memory.mT / math.sqrt(queries.shape[-1])
    hidden = (source_tokens == pad_id)[:, None, :]
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), -1) @ memory


def cross_large_negative_fill(queries, memory, source_tokens, pad_id):
    scores = queries @ memory.mT / math.sqrt(queries.shape[-1])
    hidden = (source_tokens == pad_id)[:, None, :]
    return torch.softmax(scores.masked_fill(hidden, -1e9), -1) @ memory


def cross_nan_to_num(queries, memory, source_tokens, pad_id):
    return cross_minus_inf_then_softmax(queries, memory, source_tokens, pad_id).nan_to_num(0.0)


def window_one_too_wide(scores, tokens, pad_id, window):
    return sliding_window(scores, tokens, pad_id, window + 1)


def minus_inf_then_softmax(scores, tokens, pad_id, window):
    allowed = sliding_window(scores, tokens, pad_id, window) > 0
    return torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)


def additive_minus_inf_then_nan_to_num(scores, tokens, pad_id, window):
    allowed = sliding_window(scores, tokens, pad_id, window) > 0
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores + additive, -1).nan_to_num(0.0)  # right values, NaN gradient


def fills_the_scores_in_place(scores, tokens, pad_id, window):
    weights = sliding_window(scores, tokens, pad_id, window)
    scores.masked_fill_(weights == 0, -1e9)
    return weights


def band_not_causal(scores, tokens, pad_id, window):
    positions = torch.arange(tokens.shape[1])
    band = (positions[:, None] - positions[None, :]).abs() < window
    return torch.softmax(
        scores.masked_fill(~(band & (tokens != pad_id)[:, None, :])[:, None], -1e9), -1
    )


def no_head_axis(scores, tokens, pad_id, window):
    positions = torch.arange(tokens.shape[1])
    behind = positions[:, None] - positions[None, :]
    mask = (behind >= 0) & (behind < window) & (tokens != pad_id)[:, None, :]  # (B, q, k)
    return masked_softmax(scores, mask=mask)  # BUG: (B, q, k) meets (B, heads, q, k)


def no_head_axis_masked_fill(scores, tokens, pad_id, window):
    positions = torch.arange(tokens.shape[1])
    behind = positions[:, None] - positions[None, :]
    mask = (behind >= 0) & (behind < window) & (tokens != pad_id)[:, None, :]  # (B, q, k)
    has_key = mask.any(-1, keepdim=True)
    filled = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)
    return torch.softmax(filled, -1).masked_fill(~has_key, 0.0)


def calls_causal_padding_mask(scores, tokens, pad_id, window):
    causal_padding_mask(tokens, pad_id)
    return sliding_window(scores, tokens, pad_id, window)


def decodes_without_a_mask(layer, sequence, tokens, pad_id):
    cache = KeyValueCache()
    steps = [layer(x, x, x, cache=cache) for x in sequence.split(1, dim=1)]
    return torch.cat(steps, dim=1)


def masks_the_new_query(layer, sequence, tokens, pad_id):
    cache = KeyValueCache()
    steps = []
    for t in range(sequence.shape[1]):
        x = sequence[:, t : t + 1]
        steps.append(layer(x, x, x, mask=(tokens[:, t] != pad_id)[:, None, None], cache=cache))
    return torch.cat(steps, dim=1)


def one_pass(layer, sequence, tokens, pad_id):
    return layer(sequence, sequence, sequence, mask=causal_padding_mask(tokens, pad_id))


def no_cache(layer, sequence, tokens, pad_id):
    return torch.cat([layer(x, x, x) for x in sequence.split(1, dim=1)], dim=1)


WRONG = [
    ("cross-attention", cross_without_scaling, "not divided by sqrt(d)"),
    ("cross-attention", cross_reads_the_pads, "the source's pad keys are read"),
    ("cross-attention", cross_with_sdpa, "calls torch's scaled_dot_product_attention"),
    ("cross-attention", cross_with_masked_softmax, "calls helpers' masked_softmax"),
    ("cross-attention", cross_minus_inf_then_softmax, "0/0 = NaN; such a row must be all zeros"),
    ("cross-attention", cross_large_negative_fill, "the same weight on every pad"),
    ("cross-attention", cross_nan_to_num, "the gradient with respect to `memory` is"),
    ("sliding window", window_one_too_wide, "the window holds window + 1 keys"),
    ("sliding window", minus_inf_then_softmax, "NaN at index"),
    (
        "sliding window",
        additive_minus_inf_then_nan_to_num,
        "the gradient with respect to `scores` is",
    ),
    ("sliding window", fills_the_scores_in_place, "changes its input `scores` in place"),
    ("sliding window", band_not_causal, "not causal"),
    ("sliding window", no_head_axis, "add the head axis: mask[:, None]"),
    ("sliding window", no_head_axis_masked_fill, "add the head axis: mask[:, None]"),
    ("sliding window", calls_causal_padding_mask, "calls helpers.masks.causal_padding_mask"),
    ("cached decoding with pads", decodes_without_a_mask, "the pad keys are read"),
    ("cached decoding with pads", masks_the_new_query, "masks the pad queries"),
    ("cached decoding with pads", one_pass, "positions at once"),
    ("cached decoding with pads", no_cache, "without a cache"),
]


def test_the_nan_answer_names_the_empty_rows(run_checker):
    verdict, out = run_checker(check_sliding_window, minus_inf_then_softmax)
    assert not verdict and "a query with no such key gets a row of zeros (not NaN)" in out, out


def test_masking_the_pad_queries_rows_as_well_is_accepted(run_checker):
    def rows_too(scores, tokens, pad_id, window):
        weights = sliding_window(scores, tokens, pad_id, window)
        return weights * (tokens != pad_id)[:, None, :, None]

    verdict, out = run_checker(check_sliding_window, rows_too)
    assert verdict is True, out


def test_the_cached_decoding_checker_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_cached_decoding_with_pads(cached_decoding_with_pads)
    assert torch.equal(torch.rand(3), expected)
