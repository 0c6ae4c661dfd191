"""Chapter 10's exercises, solved as a learner would: merging two partial attention outputs by
their log-sum-exp, grouped-query attention by grouping the query heads, and causal tiled
attention that skips the tiles above the diagonal."""

import math

import torch

from helpers.attention import masked_softmax


def merge_partial_attention(output_a, lse_a, output_b, lse_b):
    """output_a, output_b (B, q, d_v) over two parts of the keys, with lse_a, lse_b (B, q)
    -> the output over all of them (B, q, d_v)."""
    largest = torch.maximum(lse_a, lse_b)  # (B, q): -inf only if neither part has a key
    shift = torch.where(largest.isfinite(), largest, torch.zeros_like(largest))
    weight_a = torch.exp(lse_a - shift)  # (B, q): part a's share, up to one common factor
    weight_b = torch.exp(lse_b - shift)
    total = weight_a + weight_b
    total = torch.where(total > 0, total, torch.ones_like(total))  # no key: 0 / 1, not 0 / 0
    merged = weight_a[..., None] * output_a + weight_b[..., None] * output_b  # (B, q, d_v)
    return merged / total[..., None]


def grouped_query_attention(queries, keys, values, mask):
    """queries (B, heads, q, d), keys (B, kv_heads, k, d), values (B, kv_heads, k, d_v) ->
    (B, heads, q, d_v), with no copies of the keys or values: the group of query heads that
    shares a key/value head is folded into the query axis."""
    batch, heads, q, d = queries.shape
    kv_heads = keys.shape[1]
    group = heads // kv_heads  # query head h = kv * group + g reads key/value head kv
    folded = queries.reshape(batch, kv_heads, group * q, d)  # (B, kv_heads, group * q, d)
    scores = folded @ keys.mT / math.sqrt(d)  # (B, kv_heads, group * q, k): one product each
    scores = scores.reshape(batch, heads, q, keys.shape[2])  # back to (B, heads, q, k)
    weights = masked_softmax(scores, mask=mask).reshape(batch, kv_heads, group * q, -1)
    out = weights @ values  # (B, kv_heads, group * q, d_v)
    return out.reshape(batch, heads, q, values.shape[-1])


def causal_tiled_attention(queries, keys, values, tile_size):
    """queries and keys (B, n, d), values (B, n, d_v) -> (B, n, d_v): causal attention, one
    block of queries and one tile of keys at a time, skipping the key tiles whose first key
    comes after the block's last query; the softmax written out, the online way."""
    batch, n, d = queries.shape
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]  # (B, rows, d)
        rows = torch.arange(start, start + block.shape[1])  # the block's query positions
        running_max = torch.full(block.shape[:2], float("-inf"))  # (B, rows)
        normaliser = torch.zeros(block.shape[:2])
        accumulator = torch.zeros(batch, block.shape[1], values.shape[-1])
        for key_start in range(0, rows[-1].item() + 1, tile_size):  # tiles up to the diagonal
            columns = torch.arange(key_start, min(key_start + tile_size, n))
            scores = block @ keys[:, columns].mT / math.sqrt(d)  # (B, rows, cols)
            scores = scores.masked_fill(columns[None, :] > rows[:, None], float("-inf"))
            new_max = torch.maximum(running_max, scores.detach().amax(-1))  # finite: key 0
            correction = torch.exp(running_max - new_max)
            weights = torch.exp(scores - new_max[..., None])
            normaliser = normaliser * correction + weights.sum(-1)
            accumulator = accumulator * correction[..., None] + weights @ values[:, columns]
            running_max = new_max
        output.append(accumulator / normaliser[..., None])
    return torch.cat(output, dim=1)  # (B, n, d_v)
