"""Chapter 03's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import torch
import torch.nn.functional as F

from helpers.attention import AdditiveAttention
from helpers.attention import masked_softmax as helper_masked_softmax
from helpers.exercises import (
    check_additive_step,
    check_attention_with_temperature,
    check_general_attention,
)
from solutions.ch03_scoring_functions import additive_step, attend, general_attention

CHECKERS = {
    "attention with a temperature": (check_attention_with_temperature, attend),
    "general (bilinear) attention": (check_general_attention, general_attention),
    "additive decoder step": (check_additive_step, additive_step),
}


# Exercise 1: attention with a boolean mask and a temperature, returning (output, weights).


def temperature_only(queries, keys, values, mask, temperature):
    weights = helper_masked_softmax(queries @ keys.transpose(1, 2) / temperature, mask=mask)
    return weights @ values, weights


def times_temperature(queries, keys, values, mask, temperature):
    d = queries.shape[-1]
    scores = queries @ keys.transpose(1, 2) / math.sqrt(d) * temperature
    weights = helper_masked_softmax(scores, mask=mask)
    return weights @ values, weights


def inverted_mask(queries, keys, values, mask, temperature):
    return attend(queries, keys, values, ~mask, temperature)


def output_only(queries, keys, values, mask, temperature):
    return attend(queries, keys, values, mask, temperature)[0]


def swapped_pair(queries, keys, values, mask, temperature):
    output, weights = attend(queries, keys, values, mask, temperature)
    return weights, output


def own_mask_fill(queries, keys, values, mask, temperature):  # -inf: an empty row is NaN
    d = queries.shape[-1]
    scores = queries @ keys.transpose(1, 2) / (math.sqrt(d) * temperature)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return weights @ values, weights


def calls_sdpa(queries, keys, values, mask, temperature):
    d = queries.shape[-1]
    scale = 1 / (math.sqrt(d) * temperature)
    output = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=scale)
    return output, attend(queries, keys, values, mask, temperature)[1]


def fills_the_mask_in_place(queries, keys, values, mask, temperature):
    output, weights = attend(queries, keys, values, mask, temperature)
    mask.fill_(True)  # changes the caller's mask
    return output, weights


# Exercise 2: Luong's general score q W k^T.


def general_scaled(queries, keys, values, W, valid_lens):
    scores = queries @ W @ keys.transpose(1, 2) / math.sqrt(keys.shape[-1])
    return helper_masked_softmax(scores, valid_lens) @ values


def general_W_transposed(queries, keys, values, W, valid_lens):
    scores = queries @ W.T @ keys.transpose(1, 2)
    return helper_masked_softmax(scores, valid_lens) @ values


def general_ignores_lengths(queries, keys, values, W, valid_lens):
    return torch.softmax(queries @ W @ keys.transpose(1, 2), -1) @ values


def general_fills_minus_1e9(queries, keys, values, W, valid_lens):  # an empty row: uniform
    scores = queries @ W @ keys.transpose(1, 2)
    if valid_lens is not None:
        allowed = torch.arange(keys.shape[1]) < valid_lens[:, None, None]
        scores = scores.masked_fill(~allowed, -1e9)
    return torch.softmax(scores, -1) @ values


# Exercise 3: one additive decoder step.


def step_without_tanh(state, projected_keys, values, W_q, w_v, valid_lens):
    scores = ((state @ W_q.T).unsqueeze(1) + projected_keys) @ w_v
    return (helper_masked_softmax(scores, valid_lens).unsqueeze(-1) * values).sum(1)


def step_without_mask(state, projected_keys, values, W_q, w_v, valid_lens):
    scores = torch.tanh((state @ W_q.T).unsqueeze(1) + projected_keys) @ w_v
    return (torch.softmax(scores, -1).unsqueeze(-1) * values).sum(1)


def step_with_the_module(state, projected_keys, values, W_q, w_v, valid_lens):
    h, d_q = W_q.shape
    layer = AdditiveAttention(key_size=h, query_size=d_q, num_hiddens=h)
    with torch.no_grad():
        layer.W_q.weight.copy_(W_q)
        layer.W_k.weight.copy_(torch.eye(h))
        layer.w_v.weight.copy_(w_v[None])
    return layer(state.unsqueeze(1), projected_keys, values, valid_lens).squeeze(1)


def step_without_key_axis(state, projected_keys, values, W_q, w_v, valid_lens):
    scores = torch.tanh(state @ W_q.T + projected_keys) @ w_v  # (B, h) + (B, k, h): no unsqueeze
    return (helper_masked_softmax(scores, valid_lens).unsqueeze(-1) * values).sum(1)


def step_detached(state, projected_keys, values, W_q, w_v, valid_lens):
    return additive_step(state, projected_keys, values, W_q.detach(), w_v, valid_lens)


WRONG = [
    ("attention with a temperature", temperature_only, "divides by the temperature only"),
    ("attention with a temperature", times_temperature, "multiplies by the temperature"),
    ("attention with a temperature", inverted_mask, "the mask is inverted"),
    ("attention with a temperature", output_only, "expected the pair (output, weights)"),
    ("attention with a temperature", swapped_pair, "return the pair in the order (output, "),
    ("attention with a temperature", own_mask_fill, "comes out NaN: a softmax over nothing"),
    ("attention with a temperature", calls_sdpa, "calls torch's scaled_dot_product_attention"),
    ("attention with a temperature", fills_the_mask_in_place, "changes its input `mask` in place"),
    ("general (bilinear) attention", general_scaled, "the general score is not scaled"),
    ("general (bilinear) attention", general_W_transposed, "uses W transposed"),
    ("general (bilinear) attention", general_ignores_lengths, "the valid lengths are ignored"),
    ("general (bilinear) attention", general_fills_minus_1e9, "all-zero weights, not uniform"),
    ("additive decoder step", step_without_tanh, "no tanh"),
    ("additive decoder step", step_without_mask, "the keys past the valid length still get weight"),
    ("additive decoder step", step_with_the_module, "calls AdditiveAttention"),
    ("additive decoder step", step_without_key_axis, "needs a key axis"),
    ("additive decoder step", step_detached, "no gradient reaches `W_q`"),
]
