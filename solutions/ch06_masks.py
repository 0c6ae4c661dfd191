"""Chapter 06's exercises, solved as a learner would: cross-attention over a padded source, a
sliding-window decoder mask with pads anywhere, and cached decoding of a padded batch."""

import math

import torch

from helpers.attention import KeyValueCache, masked_softmax


def cross_attention(queries, memory, source_tokens, pad_id):
    """queries (B, T, d) attend to memory (B, S, d), keys and values alike; no source pads.
    A source of nothing but pads gives its queries rows of zeros, with a zero gradient."""
    scores = queries @ memory.transpose(1, 2) / math.sqrt(queries.shape[-1])  # (B, T, S)
    source_keys = (source_tokens != pad_id)[:, None, :]  # (B, 1, S): broadcast over T
    has_a_key = source_keys.any(dim=-1, keepdim=True)  # (B, 1, 1): False for a source of pads
    filled = scores.masked_fill(~source_keys, float("-inf"))  # (B, T, S): pads get exp(-inf) = 0
    filled = filled.masked_fill(~has_a_key, 0.0)  # a row of only -inf would give 0/0 = NaN
    weights = torch.softmax(filled, dim=-1).masked_fill(~has_a_key, 0.0)  # (B, T, S)
    return weights @ memory  # (B, T, d)


def sliding_window(scores, tokens, pad_id, window):
    """scores (B, heads, n, n) -> weights: keys j with i - window < j <= i that are not pads."""
    positions = torch.arange(tokens.shape[1])
    behind = positions[:, None] - positions[None, :]  # (n, n): i - j
    in_window = (behind >= 0) & (behind < window)  # (n, n): causal, at most `window` keys
    real_keys = (tokens != pad_id)[:, None, :]  # (B, 1, n)
    mask = (in_window & real_keys)[:, None]  # (B, 1, n, n): the same for every head
    return masked_softmax(scores, mask=mask)  # empty rows come out as zeros


def cached_decoding_with_pads(layer, sequence, tokens, pad_id):
    """One position per call, with a key/value cache; step t hides the pad keys among 0..t."""
    cache = KeyValueCache()
    outputs = []
    for t in range(sequence.shape[1]):
        new = sequence[:, t : t + 1]  # (B, 1, d_model)
        keys_so_far = (tokens[:, : t + 1] != pad_id)[:, None, :]  # (B, 1, t + 1)
        outputs.append(layer(new, new, new, mask=keys_so_far, cache=cache))  # (B, 1, d_model)
    return torch.cat(outputs, dim=1)  # (B, n, d_model)
