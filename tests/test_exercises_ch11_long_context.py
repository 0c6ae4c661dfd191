"""Chapter 11's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import torch
import torch.nn.functional as F

from helpers.exercises import (
    check_alibi_attention,
    check_chunked_linear_attention,
    check_rope_half_split,
)
from helpers.long_context import linear_attention
from helpers.positional import alibi_bias, apply_rope
from solutions.ch11_long_context import (
    alibi_attention,
    chunked_linear_attention,
    rope_half_split,
    slopes_for,
)

CHECKERS = {
    "rope half split": (check_rope_half_split, rope_half_split),
    "alibi attention": (check_alibi_attention, alibi_attention),
    "chunked linear attention": (check_chunked_linear_attention, chunked_linear_attention),
}


def rope_interleaved(x, positions):
    d = x.shape[-1]
    rates = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * rates
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)


def rope_turns_backwards(x, positions):
    return rope_half_split(x, -positions)


def rope_slow_frequencies(x, positions):
    d = x.shape[-1]
    angles = positions.double()[:, None] * 10000.0 ** (-torch.arange(d // 2).double() / d)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def rope_ignores_positions(x, positions):
    return rope_half_split(x, torch.arange(x.shape[-2]))


def rope_with_the_helper(x, positions):
    half = torch.arange(x.shape[-1] // 2)
    order = torch.stack([half, half + x.shape[-1] // 2], -1).flatten()
    return apply_rope(x[..., order], positions)[..., order.argsort()]


def rope_angles_in_float32(x, positions):
    d = x.shape[-1]
    frequencies = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angles = torch.cat([positions[:, None] * frequencies] * 2, dim=-1)  # float32
    rotated_half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return x * angles.cos().to(x.dtype) + rotated_half * angles.sin().to(x.dtype)


def rope_in_place(x, positions):
    x[...] = rope_half_split(x.clone(), positions)
    return x


def alibi_plus_sign(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    scores = scores + slopes_for(heads)[:, None, None] * distance
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_naive_slopes(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    slopes = torch.tensor([2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)])
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1]) - slopes[:, None, None] * distance
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_slopes_reversed(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    scores = scores - slopes_for(heads).flip(0)[:, None, None] * distance
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_queries_from_zero(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = torch.arange(q)[:, None] - torch.arange(k)[None, :]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    scores = scores - slopes_for(heads)[:, None, None] * distance.abs()
    return torch.softmax(scores.masked_fill(distance < 0, float("-inf")), -1) @ values


def alibi_not_causal(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    distance = (torch.arange(k - q, k)[:, None] - torch.arange(k)[None, :]).abs()
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    return torch.softmax(scores - slopes_for(heads)[:, None, None] * distance, -1) @ values


def alibi_with_the_helper(queries, keys, values):
    heads, q, k = queries.shape[1], queries.shape[2], keys.shape[2]
    causal = torch.arange(k)[None, :] <= torch.arange(k - q, k)[:, None]
    bias = alibi_bias(heads, q, k).masked_fill(~causal, float("-inf"))
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=bias)


def chunks_without_state(queries, keys, values, chunk_size):
    return torch.cat(
        [
            linear_attention_by_hand(
                queries[..., s : s + chunk_size, :],
                keys[..., s : s + chunk_size, :],
                values[..., s : s + chunk_size, :],
            )
            for s in range(0, queries.shape[-2], chunk_size)
        ],
        dim=-2,
    )


def linear_attention_by_hand(queries, keys, values):
    similarity = ((F.elu(queries) + 1) @ (F.elu(keys) + 1).mT).tril()
    return similarity @ values / similarity.sum(-1, keepdim=True)


def chunks_without_inside_mask(queries, keys, values, chunk_size):
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, v = (
            phi_q[..., s : s + chunk_size, :],
            phi_k[..., s : s + chunk_size, :],
            values[..., s : s + chunk_size, :],
        )
        inside = q @ k.mT  # BUG: no tril
        outputs.append(
            (inside @ v + q @ state) / (inside.sum(-1, keepdim=True) + q @ normaliser[..., None])
        )
        state = state + k.mT @ v
        normaliser = normaliser + k.sum(-2)
    return torch.cat(outputs, dim=-2)


def chunks_adding_before_reading(queries, keys, values, chunk_size):
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    outputs = []
    for s in range(0, queries.shape[-2], chunk_size):
        q, k, v = (t[..., s : s + chunk_size, :] for t in (phi_q, phi_k, values))
        state = state + k.mT @ v  # BUG: this chunk added before its queries read the state
        normaliser = normaliser + k.sum(-2)
        inside = (q @ k.mT).tril()
        outputs.append(
            (inside @ v + q @ state) / (inside.sum(-1, keepdim=True) + q @ normaliser[..., None])
        )
    return torch.cat(outputs, dim=-2)


def chunks_with_exp_features(queries, keys, values, chunk_size):
    similarity = (queries.exp() @ keys.exp().mT).tril()
    return similarity @ values / similarity.sum(-1, keepdim=True)


def chunks_unnormalised(queries, keys, values, chunk_size):
    similarity = ((F.elu(queries) + 1) @ (F.elu(keys) + 1).mT).tril()
    return similarity @ values


def chunks_with_softmax(queries, keys, values, chunk_size):
    n = queries.shape[-2]
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    future = ~torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ values


def chunks_with_the_helper(queries, keys, values, chunk_size):
    return linear_attention(queries, keys, values, causal=True)


WRONG = [
    ("rope half split", rope_interleaved, "pairs neighbouring dimensions (2j, 2j + 1)"),
    ("rope half split", rope_turns_backwards, "turns the wrong way"),
    ("rope half split", rope_slow_frequencies, "not 10000^(-j/d)"),
    ("rope half split", rope_ignores_positions, "instead of the `positions` given"),
    ("rope half split", rope_with_the_helper, "calls helpers.positional.apply_rope"),
    ("rope half split", rope_in_place, "changes its input `x` in place"),
    ("rope half split", rope_angles_in_float32, "lose precision in float32"),
    ("alibi attention", alibi_plus_sign, "the bias has the wrong sign"),
    ("alibi attention", alibi_naive_slopes, "every other slope of the next one"),
    ("alibi attention", alibi_slopes_reversed, "the slopes are in reverse order"),
    ("alibi attention", alibi_queries_from_zero, "the queries are the last q positions"),
    ("alibi attention", alibi_not_causal, "no causal mask"),
    ("alibi attention", alibi_with_the_helper, "calls helpers.positional.alibi_bias"),
    ("chunked linear attention", chunks_without_state, "the state is not carried"),
    ("chunked linear attention", chunks_without_inside_mask, "no causal mask inside a chunk"),
    ("chunked linear attention", chunks_unnormalised, "not normalised"),
    ("chunked linear attention", chunks_with_softmax, "softmax weights"),
    ("chunked linear attention", chunks_with_exp_features, "not exp(x)"),
    ("chunked linear attention", chunks_adding_before_reading, "before the chunk reads it"),
    (
        "chunked linear attention",
        chunks_with_the_helper,
        "calls helpers.long_context.linear_attention",
    ),
]
