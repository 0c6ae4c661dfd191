"""Chapter 10's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import pytest
import torch
import torch.nn.functional as F

from helpers.attention import DotProductAttention, masked_softmax
from helpers.efficient import tiled_attention
from helpers.exercises import (
    check_causal_tiled_attention,
    check_grouped_query_attention,
    check_merge_partial_attention,
)
from helpers.exercises.ch10_efficient_attention import _merge, _part
from solutions.ch10_efficient_attention import (
    causal_tiled_attention,
    grouped_query_attention,
    merge_partial_attention,
)

CHECKERS = {
    "merge partial attention": (check_merge_partial_attention, merge_partial_attention),
    "grouped-query attention": (check_grouped_query_attention, grouped_query_attention),
    "causal tiled attention": (check_causal_tiled_attention, causal_tiled_attention),
}


def merge_by_averaging(output_a, lse_a, output_b, lse_b):
    return (output_a + output_b) / 2


def merge_without_the_max(output_a, lse_a, output_b, lse_b):
    weight_a, weight_b = lse_a.exp()[..., None], lse_b.exp()[..., None]
    return (weight_a * output_a + weight_b * output_b) / (weight_a + weight_b)


def merge_through_the_total_lse(output_a, lse_a, output_b, lse_b):
    total = torch.logaddexp(lse_a, lse_b)[..., None]
    return (lse_a[..., None] - total).exp() * output_a + (lse_b[..., None] - total).exp() * output_b


def merge_through_the_total_then_nan_to_num(output_a, lse_a, output_b, lse_b):
    return merge_through_the_total_lse(output_a, lse_a, output_b, lse_b).nan_to_num(0.0)


def merge_through_logaddexp_guarded(output_a, lse_a, output_b, lse_b):
    """Right values, but logaddexp(-inf, -inf) sends NaN into the gradient."""
    total = torch.logaddexp(lse_a, lse_b)
    shift = torch.where(total.isfinite(), total, torch.zeros_like(total))[..., None]
    return (lse_a[..., None] - shift).exp() * output_a + (lse_b[..., None] - shift).exp() * output_b


def merge_in_place(output_a, lse_a, output_b, lse_b):
    merged = merge_partial_attention(output_a, lse_a, output_b, lse_b)
    output_a.mul_(0)
    return merged


def gqa_in_repeat_order(queries, keys, values, mask):
    group = queries.shape[1] // keys.shape[1]
    keys, values = keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    return masked_softmax(scores, mask=mask) @ values


def gqa_groups_reshaped_the_wrong_way(queries, keys, values, mask):
    batch, heads, q, d = queries.shape
    kv_heads, group = keys.shape[1], heads // keys.shape[1]
    grouped = queries.reshape(batch, group, kv_heads, q, d).transpose(1, 2)  # BUG: h % kv
    scores = grouped.reshape(batch, kv_heads, group * q, d) @ keys.mT / math.sqrt(d)
    scores = scores.reshape(batch, kv_heads, group, q, -1).transpose(1, 2)  # (B, g, kv, q, k)
    weights = masked_softmax(scores, mask=None if mask is None else mask[:, None])
    weights = weights.transpose(1, 2).reshape(batch, kv_heads, group * q, -1)
    out = (weights @ values).reshape(batch, kv_heads, group, q, -1).transpose(1, 2)
    return out.reshape(batch, heads, q, values.shape[-1])


def gqa_with_repeat_interleave(queries, keys, values, mask):
    group = queries.shape[1] // keys.shape[1]
    keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    return masked_softmax(scores, mask=mask) @ values


def gqa_with_expand_and_broadcast(queries, keys, values, mask):
    """expand is a view, but the broadcasting matrix product copies the key/value heads."""
    batch, heads, q, d = queries.shape
    kv_heads, group = keys.shape[1], heads // keys.shape[1]
    expanded_keys = keys[:, :, None].expand(batch, kv_heads, group, *keys.shape[2:])
    expanded_values = values[:, :, None].expand(batch, kv_heads, group, *values.shape[2:])
    grouped = queries.reshape(batch, kv_heads, group, q, d)
    scores = (grouped @ expanded_keys.mT / math.sqrt(d)).reshape(batch, heads, q, -1)
    weights = masked_softmax(scores, mask=mask).reshape(batch, kv_heads, group, q, -1)
    return (weights @ expanded_values).reshape(batch, heads, q, -1)


def gqa_with_sdpa(queries, keys, values, mask):
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, enable_gqa=True)


def gqa_unscaled(queries, keys, values, mask):
    return grouped_query_attention(queries * math.sqrt(queries.shape[-1]), keys, values, mask)


def causal_every_tile(queries, keys, values, tile_size):
    """The right values from every tile: a dense kernel with a mask."""
    n = queries.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]
        scores = torch.cat(
            [
                block @ keys[:, s : s + tile_size].mT / math.sqrt(queries.shape[-1])
                for s in range(0, n, tile_size)
            ],
            dim=-1,
        )
        weights = scores.masked_fill(~causal[start : start + tile_size], float("-inf"))
        weights = (weights - weights.amax(-1, keepdim=True)).exp()
        output.append(weights / weights.sum(-1, keepdim=True) @ values)
    return torch.cat(output, dim=1)


def causal_without_the_diagonal_mask(queries, keys, values, tile_size):
    n, d = queries.shape[1], queries.shape[-1]
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]
        keys_read = min(start + tile_size, n)
        scores = block @ keys[:, :keys_read].mT / math.sqrt(d)
        weights = (scores - scores.amax(-1, keepdim=True)).exp()
        output.append(weights / weights.sum(-1, keepdim=True) @ values[:, :keys_read])
    return torch.cat(output, dim=1)


def _causal_tiles(queries, keys, values, tile_size, rescale=True, diagonal=True):
    """A learner's causal tile loop, with one of two typical slips."""
    batch, n, d = queries.shape
    output = torch.zeros(batch, n, values.shape[-1])
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]
        rows = torch.arange(start, start + block.shape[1])
        running_max = torch.full(block.shape[:2], float("-inf"))
        normaliser = torch.zeros(block.shape[:2])
        accumulator = torch.zeros(batch, block.shape[1], values.shape[-1])
        last_key = rows[-1].item() if diagonal else start - 1
        for key_start in range(0, last_key + 1, tile_size):
            columns = torch.arange(key_start, min(key_start + tile_size, n))
            scores = block @ keys[:, columns].mT / math.sqrt(d)
            scores = scores.masked_fill(columns > rows[:, None], float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(-1))
            correction = torch.exp(running_max - new_max) if rescale else torch.ones(1)
            weights = torch.exp(scores - new_max[..., None])
            normaliser = normaliser * correction + weights.sum(-1)
            accumulator = accumulator * correction[..., None] + weights @ values[:, columns]
            running_max = new_max
        safe = torch.where(normaliser > 0, normaliser, 1.0)
        output[:, start : start + tile_size] = accumulator / safe[..., None]
    return output


def causal_without_rescaling(queries, keys, values, tile_size):
    return _causal_tiles(queries, keys, values, tile_size, rescale=False)


def causal_skipping_the_diagonal_tile(queries, keys, values, tile_size):
    return _causal_tiles(queries, keys, values, tile_size, diagonal=False)


def causal_with_tiled_attention(queries, keys, values, tile_size):
    n = queries.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return tiled_attention(queries, keys, values, causal, tile_size)


def causal_with_softmax(queries, keys, values, tile_size):
    n = queries.shape[1]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ values


WRONG = [
    ("merge partial attention", merge_by_averaging, "the two outputs are averaged"),
    ("merge partial attention", merge_without_the_max, "without subtracting the larger lse"),
    ("merge partial attention", merge_through_the_total_lse, "exp(-inf - (-inf)) = NaN"),
    (
        "merge partial attention",
        merge_through_the_total_then_nan_to_num,
        "the values are right but the gradient with respect to",
    ),
    ("merge partial attention", merge_through_logaddexp_guarded, "torch.logaddexp(-inf, -inf)"),
    ("merge partial attention", merge_in_place, "changes its input `output_a` in place"),
    ("grouped-query attention", gqa_in_repeat_order, "copies the key/value heads: inside your"),
    ("grouped-query attention", gqa_groups_reshaped_the_wrong_way, "reads key/value head h %"),
    ("grouped-query attention", gqa_with_repeat_interleave, "fold each group of query heads"),
    ("grouped-query attention", gqa_with_expand_and_broadcast, "a matrix product that broad"),
    ("grouped-query attention", gqa_with_sdpa, "calls torch's scaled_dot_product_attention"),
    ("grouped-query attention", gqa_unscaled, "not divided by sqrt(d)"),
    ("causal tiled attention", causal_every_tile, "computes key tiles above the diagonal"),
    (
        "causal tiled attention",
        causal_without_the_diagonal_mask,
        "the tile on the diagonal needs the causal mask",
    ),
    ("causal tiled attention", causal_without_rescaling, "not rescaled when the maximum grows"),
    ("causal tiled attention", causal_skipping_the_diagonal_tile, "the tile on the diagonal is"),
    ("causal tiled attention", causal_with_tiled_attention, "calls helpers.efficient.tiled"),
    ("causal tiled attention", causal_with_softmax, "computes a softmax with torch"),
]


def test_the_merge_reference_equals_attention_over_all_the_keys():
    scores, values = torch.randn(2, 3, 10) * 3, torch.randn(2, 10, 4)
    mask = torch.rand(2, 3, 10) > 0.4
    mask[0, 1] = False
    mask[1, 0, :4] = False
    parts = [_part(scores[..., s], mask[..., s], values[:, s]) for s in (slice(0, 4), slice(4, 10))]
    merged = _merge(*parts[0], *parts[1])
    torch.testing.assert_close(merged, masked_softmax(scores, mask=mask) @ values)


def test_the_causal_solution_equals_dot_product_attention():
    q, k, v = torch.randn(2, 11, 4), torch.randn(2, 11, 4), torch.randn(2, 11, 3)
    causal = torch.ones(11, 11, dtype=torch.bool).tril()
    torch.testing.assert_close(
        causal_tiled_attention(q, k, v, 4), DotProductAttention()(q, k, v, mask=causal)
    )


# Right answers written in other styles: each must be accepted.


def merge_by_softmax_over_the_two_lse(output_a, lse_a, output_b, lse_b):
    both = torch.stack([lse_a, lse_b], dim=-1)  # (B, q, 2)
    largest = both.amax(-1, keepdim=True)
    weights = (both - torch.where(largest.isfinite(), largest, 0.0)).exp()
    total = weights.sum(-1, keepdim=True)
    weights = weights / torch.where(total > 0, total, 1.0)
    return weights[..., :1] * output_a + weights[..., 1:] * output_b


def merge_in_float64(output_a, lse_a, output_b, lse_b):
    merged = merge_partial_attention(
        output_a.double(), lse_a.double(), output_b.double(), lse_b.double()
    )
    return merged.to(output_a.dtype)


def merge_with_lse_clamped_to_minus_1e9(output_a, lse_a, output_b, lse_b):
    """-1e9 in place of -inf: a part with no key then weighs exp(-1e9 - m) = 0."""
    lse_a, lse_b = lse_a.clamp(min=-1e9), lse_b.clamp(min=-1e9)
    largest = torch.maximum(lse_a, lse_b)
    weight_a, weight_b = (lse_a - largest).exp()[..., None], (lse_b - largest).exp()[..., None]
    return (weight_a * output_a + weight_b * output_b) / (weight_a + weight_b)


def merge_by_sigmoid_of_the_difference(output_a, lse_a, output_b, lse_b):
    """exp(a) / (exp(a) + exp(b)) = sigmoid(a - b), guarded where both are -inf."""
    neither = (lse_a == float("-inf")) & (lse_b == float("-inf"))
    share_a = torch.sigmoid(torch.where(neither, 0.0, lse_a - lse_b))[..., None]
    return share_a * output_a + (1 - share_a) * output_b


def merge_one_query_at_a_time(output_a, lse_a, output_b, lse_b):
    rows = []
    for b in range(lse_a.shape[0]):
        for i in range(lse_a.shape[1]):
            largest = torch.maximum(lse_a[b, i], lse_b[b, i])
            if largest == float("-inf"):
                rows.append(torch.zeros_like(output_a[b, i]))
                continue
            weight_a, weight_b = (lse_a[b, i] - largest).exp(), (lse_b[b, i] - largest).exp()
            rows.append(
                (weight_a * output_a[b, i] + weight_b * output_b[b, i]) / (weight_a + weight_b)
            )
    return torch.stack(rows).reshape(output_a.shape)


def gqa_by_einsum(queries, keys, values, mask):
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries.reshape(batch, kv_heads, heads // kv_heads, q, d)
    scores = torch.einsum("bhgqd,bhkd->bhgqk", grouped, keys) / math.sqrt(d)
    weights = masked_softmax(scores.reshape(batch, heads, q, -1), mask=mask)
    weights = weights.reshape(batch, kv_heads, heads // kv_heads, q, -1)
    return torch.einsum("bhgqk,bhkd->bhgqd", weights, values).reshape(batch, heads, q, -1)


def gqa_one_head_at_a_time(queries, keys, values, mask):
    group = queries.shape[1] // keys.shape[1]
    heads = []
    for head in range(queries.shape[1]):
        scores = queries[:, head] @ keys[:, head // group].mT / math.sqrt(queries.shape[-1])
        weights = masked_softmax(scores, mask=None if mask is None else mask[:, 0])
        heads.append(weights @ values[:, head // group])
    return torch.stack(heads, dim=1)


def gqa_with_minus_1e9_and_empty_rows_zeroed(queries, keys, values, mask):
    """torch.softmax over scores filled with -1e9, then the rows with no key set to zero."""
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    folded = queries.reshape(batch, kv_heads, heads // kv_heads * q, d)
    scores = (folded @ keys.mT / math.sqrt(d)).reshape(batch, heads, q, -1)
    if mask is not None:
        scores = torch.where(mask, scores, -1e9)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask.any(-1, keepdim=True)
    out = weights.reshape(batch, kv_heads, heads // kv_heads * q, -1) @ values
    return out.reshape(batch, heads, q, -1)


def gqa_in_float64_one_group_at_a_time(queries, keys, values, mask):
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads
    outputs = []
    for kv in range(kv_heads):
        block = queries[:, kv * group : (kv + 1) * group].double().reshape(batch, group * q, d)
        scores = (block @ keys[:, kv].double().mT / math.sqrt(d)).reshape(batch, group, q, -1)
        weights = masked_softmax(scores, mask=mask).reshape(batch, group * q, -1)
        outputs.append((weights @ values[:, kv].double()).reshape(batch, group, q, -1))
    return torch.cat(outputs, dim=1).to(queries.dtype)


def _causal_by_tiles(queries, keys, values, tile_size, scores_of, dtype=None):
    """A learner's causal tile loop; scores_of(block, keys) computes one tile's scores."""
    batch, n, d = queries.shape
    dtype = dtype or queries.dtype
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size].to(dtype)
        rows = torch.arange(start, start + block.shape[1])
        running_max = torch.full(block.shape[:2], -math.inf, dtype=dtype)
        normaliser = torch.zeros(block.shape[:2], dtype=dtype)
        accumulator = torch.zeros(batch, block.shape[1], values.shape[-1], dtype=dtype)
        for key_start in range(0, start + block.shape[1], tile_size):
            columns = torch.arange(key_start, min(key_start + tile_size, n))
            scores = scores_of(block, keys[:, columns].to(dtype)) / math.sqrt(d)
            scores = torch.where(columns[None, :] <= rows[:, None], scores, -1e9)
            new_max = torch.maximum(running_max, scores.amax(-1))
            correction = torch.exp(running_max - new_max)
            weights = torch.exp(scores - new_max[..., None])
            normaliser = normaliser * correction + weights.sum(-1)
            accumulator = accumulator * correction[..., None] + weights @ values[:, columns].to(
                dtype
            )
            running_max = new_max
        output.append(accumulator / normaliser[..., None])
    return torch.cat(output, dim=1).to(queries.dtype)


def causal_tiles_by_einsum(queries, keys, values, tile_size):
    return _causal_by_tiles(
        queries, keys, values, tile_size, lambda b, k: torch.einsum("bqd,bkd->bqk", b, k)
    )


def causal_tiles_by_broadcast_products(queries, keys, values, tile_size):
    """The scores of each tile as a broadcast multiply-and-sum: as many products as @."""
    return _causal_by_tiles(
        queries, keys, values, tile_size, lambda b, k: (b[:, :, None, :] * k[:, None]).sum(-1)
    )


def causal_tiles_in_float64(queries, keys, values, tile_size):
    return _causal_by_tiles(queries, keys, values, tile_size, lambda b, k: b @ k.mT, torch.float64)


def causal_tiles_with_a_break(queries, keys, values, tile_size):
    n = queries.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    output = []
    for start in range(0, n, tile_size):
        block, mask = queries[:, start : start + tile_size], causal[start : start + tile_size]
        running_max = torch.full(block.shape[:2], float("-inf"))
        normaliser = torch.zeros(block.shape[:2])
        accumulator = torch.zeros(*block.shape[:2], values.shape[-1])
        for key_start in range(0, n, tile_size):
            if key_start >= start + block.shape[1]:
                break  # every later tile lies above the diagonal
            columns = slice(key_start, key_start + tile_size)
            scores = block @ keys[:, columns].mT / math.sqrt(queries.shape[-1])
            scores = scores.masked_fill(~mask[:, columns], float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(-1))
            correction = torch.exp(running_max - new_max)
            weights = torch.exp(scores - new_max[..., None])
            normaliser = normaliser * correction + weights.sum(-1)
            accumulator = accumulator * correction[..., None] + weights @ values[:, columns]
            running_max = new_max
        output.append(accumulator / normaliser[..., None])
    return torch.cat(output, dim=1)


def causal_one_query_at_a_time(queries, keys, values, tile_size):
    """No tiles: each query reads the keys up to itself (accepted, as the prompt says)."""
    rows = []
    for i in range(queries.shape[1]):
        scores = queries[:, i : i + 1] @ keys[:, : i + 1].mT / math.sqrt(queries.shape[-1])
        weights = torch.exp(scores - scores.amax(-1, keepdim=True))
        rows.append(weights / weights.sum(-1, keepdim=True) @ values[:, : i + 1])
    return torch.cat(rows, dim=1)


RIGHT = [
    ("merge partial attention", merge_by_softmax_over_the_two_lse),
    ("merge partial attention", merge_in_float64),
    ("merge partial attention", merge_with_lse_clamped_to_minus_1e9),
    ("merge partial attention", merge_by_sigmoid_of_the_difference),
    ("merge partial attention", merge_one_query_at_a_time),
    ("grouped-query attention", gqa_by_einsum),
    ("grouped-query attention", gqa_one_head_at_a_time),
    ("grouped-query attention", gqa_with_minus_1e9_and_empty_rows_zeroed),
    ("grouped-query attention", gqa_in_float64_one_group_at_a_time),
    ("causal tiled attention", causal_tiles_with_a_break),
    ("causal tiled attention", causal_tiles_by_einsum),
    ("causal tiled attention", causal_tiles_by_broadcast_products),
    ("causal tiled attention", causal_tiles_in_float64),
    ("causal tiled attention", causal_one_query_at_a_time),
]


@pytest.mark.parametrize(("exercise", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


# More wrong answers, each named by its own diagnosis (test_exercises.py runs WRONG).


def merge_without_dividing(output_a, lse_a, output_b, lse_b):
    largest = torch.maximum(lse_a, lse_b)
    shift = torch.where(largest.isfinite(), largest, 0.0)[..., None]
    return (lse_a[..., None] - shift).exp() * output_a + (lse_b[..., None] - shift).exp() * output_b


def merge_with_the_weights_swapped(output_a, lse_a, output_b, lse_b):
    return merge_partial_attention(output_b, lse_a, output_a, lse_b)


def _gqa_scores(queries, keys):
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    folded = queries.reshape(batch, kv_heads, heads // kv_heads * q, d)
    return (folded @ keys.mT / math.sqrt(d)).reshape(batch, heads, q, -1)


def _gqa_read(weights, values):
    batch, heads, q, k = weights.shape
    kv_heads = values.shape[1]
    out = weights.reshape(batch, kv_heads, heads // kv_heads * q, k) @ values
    return out.reshape(batch, heads, q, -1)


def gqa_with_minus_inf_then_softmax(queries, keys, values, mask):
    scores = _gqa_scores(queries, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _gqa_read(torch.softmax(scores, dim=-1), values)


def gqa_with_minus_1e9(queries, keys, values, mask):
    scores = _gqa_scores(queries, keys)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return _gqa_read(torch.softmax(scores, dim=-1), values)


def gqa_ignoring_the_mask(queries, keys, values, mask):
    return _gqa_read(masked_softmax(_gqa_scores(queries, keys)), values)


def gqa_with_the_mask_reversed(queries, keys, values, mask):
    reversed_mask = None if mask is None else ~mask  # BUG: True read as "ignore"
    return _gqa_read(masked_softmax(_gqa_scores(queries, keys), mask=reversed_mask), values)


def causal_every_tile_by_broadcast_products(queries, keys, values, tile_size):
    """Every tile computed, its products written as multiply-and-sum (no matrix product)."""
    n, d = queries.shape[1], queries.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]
        scores = (block[:, :, None, :] * keys[:, None]).sum(-1) / math.sqrt(d)  # every key
        scores = scores.masked_fill(~causal[start : start + tile_size], float("-inf"))
        weights = (scores - scores.amax(-1, keepdim=True)).exp()
        weights = weights / weights.sum(-1, keepdim=True)
        output.append((weights[..., None] * values[:, None]).sum(-2))
    return torch.cat(output, dim=1)


def causal_every_key_by_dot_products(queries, keys, values, tile_size):
    """One query at a time, every key read with torch.dot (no matrix product at all)."""
    batch, n, d = queries.shape
    output = torch.zeros(batch, n, values.shape[-1])
    for b in range(batch):
        for i in range(n):
            scores = torch.stack([torch.dot(queries[b, i], keys[b, j]) for j in range(n)])
            scores = torch.where(torch.arange(n) <= i, scores / math.sqrt(d), -math.inf)
            weights = (scores - scores.max()).exp()
            output[b, i] = torch.mv(values[b].T, weights / weights.sum())
    return output


def causal_one_tile_too_many(queries, keys, values, tile_size):
    """Off by one: every block also reads the tile after its diagonal (masked, so the values
    are right)."""
    n = queries.shape[1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]
        end = min(start + 2 * tile_size, n)  # BUG: one tile past the diagonal
        scores = block @ keys[:, :end].mT / math.sqrt(queries.shape[-1])
        scores = scores.masked_fill(~causal[start : start + tile_size, :end], float("-inf"))
        weights = (scores - scores.amax(-1, keepdim=True)).exp()
        output.append(weights / weights.sum(-1, keepdim=True) @ values[:, :end])
    return torch.cat(output, dim=1)


def _tiles_with_softmax(softmax):
    def answer(queries, keys, values, tile_size):
        n = queries.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        output = []
        for start in range(0, n, tile_size):
            end = min(start + tile_size, n)
            scores = queries[:, start:end] @ keys[:, :end].mT / math.sqrt(queries.shape[-1])
            scores = scores.masked_fill(~causal[start:end, :end], float("-inf"))
            output.append(softmax(scores) @ values[:, :end])
        return torch.cat(output, dim=1)

    return answer


def causal_with_tensor_softmax(queries, keys, values, tile_size):
    return _tiles_with_softmax(lambda s: s.softmax(-1))(queries, keys, values, tile_size)


def causal_with_nn_softmax(queries, keys, values, tile_size):
    return _tiles_with_softmax(torch.nn.Softmax(dim=-1))(queries, keys, values, tile_size)


def causal_with_functional_softmax(queries, keys, values, tile_size):
    return _tiles_with_softmax(lambda s: F.softmax(s, dim=-1))(queries, keys, values, tile_size)


def causal_with_logsumexp(queries, keys, values, tile_size):
    softmax = _tiles_with_softmax(lambda s: (s - s.logsumexp(-1, keepdim=True)).exp())
    return softmax(queries, keys, values, tile_size)


def causal_with_masked_softmax(queries, keys, values, tile_size):
    return _tiles_with_softmax(masked_softmax)(queries, keys, values, tile_size)


WRONG += [
    ("merge partial attention", merge_without_dividing, "not divided by the total weight"),
    ("merge partial attention", merge_with_the_weights_swapped, "the outputs are swapped"),
    ("grouped-query attention", gqa_with_minus_inf_then_softmax, "exp(-inf) / 0 = NaN"),
    ("grouped-query attention", gqa_with_minus_1e9, "the average of the values instead"),
    ("grouped-query attention", gqa_ignoring_the_mask, "the mask is ignored"),
    ("grouped-query attention", gqa_with_the_mask_reversed, "read the wrong way round"),
    (
        "causal tiled attention",
        causal_every_tile_by_broadcast_products,
        "computes key tiles above the diagonal",
    ),
    (
        "causal tiled attention",
        causal_every_key_by_dot_products,
        "computes key tiles above the diagonal",
    ),
    ("causal tiled attention", causal_one_tile_too_many, "computes key tiles above the diagonal"),
    ("causal tiled attention", causal_with_tensor_softmax, "computes a softmax with torch"),
    ("causal tiled attention", causal_with_nn_softmax, "computes a softmax with torch"),
    ("causal tiled attention", causal_with_functional_softmax, "computes a softmax with torch"),
    ("causal tiled attention", causal_with_logsumexp, "aten.logsumexp"),
    ("causal tiled attention", causal_with_masked_softmax, "calls helpers' masked_softmax"),
]


def test_sdpa_is_named_as_a_call_not_as_copies(run_checker):
    verdict, out = run_checker(check_grouped_query_attention, gqa_with_sdpa)
    assert verdict is False and "copies" not in out, out
    assert out.count("calls torch's scaled_dot_product_attention") == 4, out


@pytest.mark.parametrize(
    "answer", [gqa_with_minus_inf_then_softmax, gqa_with_minus_1e9], ids=lambda a: a.__name__
)
def test_a_fill_is_blamed_only_for_the_query_with_no_key(answer, run_checker):
    """Everywhere else these fills are right: the report names the empty row, not the fill."""
    verdict, out = run_checker(check_grouped_query_attention, answer)
    assert verdict is False and "(here query 0 of example 0, which may read no key)" in out, out
    assert out.startswith("Not yet: 3 of 4"), out


def test_a_broadcast_product_counts_as_much_as_the_matrix_product():
    from helpers.exercises.ch10_efficient_attention import _Multiplications

    a, b = torch.randn(2, 3, 4), torch.randn(2, 5, 4)
    counts = []
    for product in (
        lambda: a @ b.mT,
        lambda: (a[:, :, None] * b[:, None]).sum(-1),
        lambda: torch.einsum("bqd,bkd->bqk", a, b),
    ):
        with _Multiplications() as counter:
            product()
        counts.append(counter.count)
    assert counts == [2 * 3 * 5 * 4] * 3


# The mistakes a learner's pass found named only by the general hint, each now diagnosed.


def merge_by_picking_the_larger_lse(output_a, lse_a, output_b, lse_b):
    return torch.where((lse_a >= lse_b)[..., None], output_a, output_b)


def gqa_broadcast_over_the_group(queries, keys, values, mask):
    """One key/value head broadcast over its group by the matrix product: torch copies it."""
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries.reshape(batch, kv_heads, heads // kv_heads, q, d)
    scores = grouped @ keys.unsqueeze(2).mT / math.sqrt(d)  # (B, kv, group, q, k)
    weights = masked_softmax(scores, mask=None if mask is None else mask.unsqueeze(2))
    return (weights @ values.unsqueeze(2)).flatten(1, 2)


def gqa_scaled_by_the_value_width(queries, keys, values, mask):
    scores = _gqa_scores(queries, keys) * math.sqrt(queries.shape[-1] / values.shape[-1])
    return _gqa_read(masked_softmax(scores, mask=mask), values)


def _online_tiles(queries, keys, values, tile_size, rescaled=("output", "sum"), strict=False):
    """A learner's causal tile loop whose running output or running sum may miss the
    rescaling, or whose mask may be strict (j < i)."""
    batch, n, d = queries.shape
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]
        rows = torch.arange(start, start + block.shape[1])
        running_max = torch.full(block.shape[:2], -math.inf)
        running_sum = torch.zeros(block.shape[:2])
        running_output = torch.zeros(batch, block.shape[1], values.shape[-1])
        for key_start in range(0, rows[-1].item() + 1, tile_size):
            columns = torch.arange(key_start, min(key_start + tile_size, n))
            scores = block @ keys[:, columns].mT / math.sqrt(d)
            allowed = columns < rows[:, None] if strict else columns <= rows[:, None]
            scores = scores.masked_fill(~allowed, -math.inf)
            new_max = torch.maximum(running_max, scores.amax(-1))
            shift = torch.where(new_max.isfinite(), new_max, 0.0)
            correction = torch.exp(running_max - shift)
            weights = torch.exp(scores - shift[..., None])
            if "sum" in rescaled:
                running_sum = running_sum * correction
            if "output" in rescaled:
                running_output = running_output * correction[..., None]
            running_sum = running_sum + weights.sum(-1)
            running_output = running_output + weights @ values[:, columns]
            running_max = new_max
        output.append(running_output / running_sum[..., None])
    return torch.cat(output, dim=1)


def causal_without_rescaling_the_output(queries, keys, values, tile_size):
    return _online_tiles(queries, keys, values, tile_size, rescaled=("sum",))


def causal_without_rescaling_the_sum(queries, keys, values, tile_size):
    return _online_tiles(queries, keys, values, tile_size, rescaled=("output",))


def causal_with_a_strict_mask(queries, keys, values, tile_size):
    return _online_tiles(queries, keys, values, tile_size, strict=True)


def causal_scaled_by_the_value_width(queries, keys, values, tile_size):
    widened = queries * math.sqrt(queries.shape[-1] / values.shape[-1])
    return _online_tiles(widened, keys, values, tile_size)


def causal_over_whole_tiles_only(queries, keys, values, tile_size):
    """Assumes n is a multiple of tile_size: the leftover queries stay zeros."""
    whole = queries.shape[1] - queries.shape[1] % tile_size
    output = torch.zeros(*queries.shape[:2], values.shape[-1])
    output[:, :whole] = _online_tiles(
        queries[:, :whole], keys[:, :whole], values[:, :whole], tile_size
    )
    return output


def causal_with_blocks_by_view(queries, keys, values, tile_size):
    """Assumes n is a multiple of tile_size: the view into blocks raises where it is not."""
    batch, n, d = queries.shape
    queries.reshape(batch, n // tile_size, tile_size, d)
    return _online_tiles(queries, keys, values, tile_size)


def causal_dropping_the_leftover_queries(queries, keys, values, tile_size):
    whole = queries.shape[1] - queries.shape[1] % tile_size
    return _online_tiles(queries[:, :whole], keys[:, :whole], values[:, :whole], tile_size)


WRONG += [
    ("merge partial attention", merge_by_picking_the_larger_lse, "picks the output of the part"),
    ("grouped-query attention", gqa_broadcast_over_the_group, "a matrix product that broad"),
    ("grouped-query attention", gqa_scaled_by_the_value_width, "divided by sqrt(d_v)"),
    ("causal tiled attention", causal_without_rescaling_the_output, "the accumulator) is not"),
    ("causal tiled attention", causal_without_rescaling_the_sum, "the normaliser) is not"),
    ("causal tiled attention", causal_with_a_strict_mask, "the mask is strict"),
    ("causal tiled attention", causal_scaled_by_the_value_width, "divided by sqrt(d_v)"),
    ("causal tiled attention", causal_over_whole_tiles_only, "the last 2 queries are zeros"),
    ("causal tiled attention", causal_with_blocks_by_view, "not a multiple of the tile size"),
    ("causal tiled attention", causal_dropping_the_leftover_queries, "not a multiple of the tile"),
]


def test_only_the_cases_whose_n_is_not_a_multiple_blame_it(run_checker):
    """n = 16 with tiles of 4 passes; n = 10 (tiles of 4) and n = 12 (tiles of 5) name it."""
    for answer in (causal_with_blocks_by_view, causal_dropping_the_leftover_queries):
        verdict, out = run_checker(check_causal_tiled_attention, answer)
        assert out.startswith("Not yet: 2 of 3"), out
        assert out.count("is not a multiple of the tile size") == 2, out


def causal_one_product_per_block_two_pass(queries, keys, values, tile_size):
    """No key tiles and no online softmax: each block of queries against every key up to its
    end in one product, then exp and sum in two passes. It computes no score above the
    diagonal tiles, so it passes (the memory the online softmax saves is not measured)."""
    n = queries.shape[1]
    output = []
    for start in range(0, n, tile_size):
        end = min(start + tile_size, n)
        scores = queries[:, start:end] @ keys[:, :end].mT / math.sqrt(queries.shape[-1])
        allowed = torch.arange(end) <= torch.arange(start, end)[:, None]
        scores = scores.masked_fill(~allowed, -math.inf)
        weights = torch.exp(scores - scores.amax(-1, keepdim=True))
        output.append(weights @ values[:, :end] / weights.sum(-1, keepdim=True))
    return torch.cat(output, dim=1)


def gqa_by_einsum_over_a_group_axis(queries, keys, values, mask):
    """einsum broadcasts nothing into a copy: the group is an axis of the queries only."""
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    grouped = queries.reshape(batch, kv_heads, heads // kv_heads, q, d)
    scores = torch.einsum("bkgqd,bksd->bkgqs", grouped, keys) / math.sqrt(d)
    weights = masked_softmax(scores, mask=None if mask is None else mask.unsqueeze(2))
    return torch.einsum("bkgqs,bksv->bkgqv", weights, values).flatten(1, 2)


@pytest.mark.parametrize(
    ("exercise", "answer"),
    [
        ("causal tiled attention", causal_one_product_per_block_two_pass),
        ("grouped-query attention", gqa_by_einsum_over_a_group_axis),
    ],
    ids=lambda a: getattr(a, "__name__", a),
)
def test_answers_the_prompts_name_as_passing_are_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out
