"""Chapter 04's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import DotProductAttention, split_heads
from helpers.attention import masked_softmax as helper_masked_softmax
from helpers.exercises import check_fold_heads, check_multi_query_attention, check_packed_attention
from solutions.ch04_multi_head_attention import (
    _merge,
    _split,
    fold,
    multi_query_attention,
    packed_attention,
    unfold,
)

CHECKERS = {
    "fold heads": (lambda answer: check_fold_heads(answer, unfold), fold),
    "unfold heads": (lambda answer: check_fold_heads(fold, answer), unfold),
    "packed multi-head attention": (check_packed_attention, packed_attention),
    "multi-query attention": (check_multi_query_attention, multi_query_attention),
}


# Exercise 1: fold the heads into the batch axis.


def fold_without_transpose(x, num_heads):
    batch, n, d = x.shape
    return x.reshape(batch * num_heads, n, d // num_heads)


def fold_heads_first(x, num_heads):
    return _split(x, num_heads).transpose(0, 1).reshape(-1, x.shape[1], x.shape[2] // num_heads)


def fold_with_the_helper(x, num_heads):
    return split_heads(x, num_heads).flatten(0, 1)


def unfold_without_transpose(x, num_heads):
    rows, n, d_head = x.shape
    return x.reshape(rows // num_heads, n, num_heads * d_head)


def unfold_with_view(x, num_heads):  # view after a transpose: fails on a fresh tensor
    rows, n, d_head = x.shape
    heads = x.view(rows // num_heads, num_heads, n, d_head).transpose(1, 2)
    return heads.view(rows // num_heads, n, num_heads * d_head)


# Exercise 2: multi-head attention from torch's packed weights.


def packed_mask_not_inverted(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    flipped = None if key_padding_mask is None else ~key_padding_mask
    return packed_attention(q, k, v, w, b, ow, ob, num_heads, flipped)


def packed_scaled_by_d_model(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    return _packed_with_scale(q, k, v, w, b, ow, ob, num_heads, key_padding_mask, q.shape[-1])


def _packed_with_scale(q, k, v, w, b, ow, ob, num_heads, key_padding_mask, d):
    W_q, W_k, W_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    qh, kh, vh = (
        _split(x @ W.T + bias, num_heads)
        for x, W, bias in ((q, W_q, b_q), (k, W_k, b_k), (v, W_v, b_v))
    )
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    weights = helper_masked_softmax(qh @ kh.transpose(-2, -1) / math.sqrt(d), mask=mask)
    return _merge(weights @ vh) @ ow.T + ob


def packed_mask_without_head_axis(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    W_q, W_k, W_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    qh, kh, vh = (
        _split(F.linear(x, W, bias), num_heads)
        for x, W, bias in ((q, W_q, b_q), (k, W_k, b_k), (v, W_v, b_v))
    )
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, :]  # (B, 1, k)
    weights = helper_masked_softmax(qh @ kh.transpose(-2, -1) / math.sqrt(qh.shape[-1]), mask=mask)
    return F.linear(_merge(weights @ vh), ow, ob)


def packed_fills_without_head_axis(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    W_q, W_k, W_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    qh, kh, vh = (
        _split(F.linear(x, W, bias), num_heads)
        for x, W, bias in ((q, W_q, b_q), (k, W_k, b_k), (v, W_v, b_v))
    )
    scores = qh @ kh.transpose(-2, -1) / math.sqrt(qh.shape[-1])
    if key_padding_mask is not None:  # masked_fill by hand, (B, 1, k): raises where B != heads
        scores = scores.masked_fill(key_padding_mask[:, None, :], float("-inf"))
    return F.linear(_merge(torch.softmax(scores, -1) @ vh), ow, ob)


def packed_untransposed_weights(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    W_q, W_k, W_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    qh, kh, vh = (
        _split(x @ W + bias, num_heads)  # (in, out) read as (out, in)
        for x, W, bias in ((q, W_q, b_q), (k, W_k, b_k), (v, W_v, b_v))
    )
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    heads = DotProductAttention()(qh, kh, vh, mask=mask)
    return _merge(heads) @ ow + ob


def packed_across_heads(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    W_q, W_k, W_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    qh, kh, vh = (  # (B, n, heads, d_head): no transpose, so heads attend to heads
        F.linear(x, W, bias).unflatten(-1, (num_heads, -1))
        for x, W, bias in ((q, W_q, b_q), (k, W_k, b_k), (v, W_v, b_v))
    )
    weights = torch.softmax(qh @ kh.transpose(-2, -1) / math.sqrt(qh.shape[-1]), -1)
    return F.linear((weights @ vh).flatten(-2), ow, ob)


def packed_calls_torch(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    layer = nn.MultiheadAttention(q.shape[-1], num_heads, batch_first=True)
    with torch.no_grad():
        layer.in_proj_weight.copy_(w)
        layer.in_proj_bias.copy_(b)
        layer.out_proj.weight.copy_(ow)
        layer.out_proj.bias.copy_(ob)
    return layer(q, k, v, key_padding_mask=key_padding_mask, need_weights=False)[0]


def packed_calls_sdpa(q, k, v, w, b, ow, ob, num_heads, key_padding_mask):
    W_q, W_k, W_v = w.chunk(3)
    b_q, b_k, b_v = b.chunk(3)
    qh, kh, vh = (
        _split(F.linear(x, W, bias), num_heads)
        for x, W, bias in ((q, W_q, b_q), (k, W_k, b_k), (v, W_v, b_v))
    )
    mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]
    return F.linear(_merge(F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask)), ow, ob)


# Exercise 3: multi-query attention.


def multi_query_scaled_by_d_model(q, k, v, W_q, W_k, W_v, W_o, num_heads, mask):
    qh = _split(q @ W_q.T, num_heads)
    kh, vh = (k @ W_k.T)[:, None], (v @ W_v.T)[:, None]
    weights = helper_masked_softmax(qh @ kh.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask=mask)
    return _merge(weights @ vh) @ W_o.T


def multi_query_without_mask(q, k, v, W_q, W_k, W_v, W_o, num_heads, mask):
    return multi_query_attention(q, k, v, W_q, W_k, W_v, W_o, num_heads, None)


def multi_query_splits_without_transpose(q, k, v, W_q, W_k, W_v, W_o, num_heads, mask):
    batch, n, d = q.shape
    qh = (q @ W_q.T).reshape(batch, num_heads, n, d // num_heads)  # bug: no transpose
    kh, vh = (k @ W_k.T)[:, None], (v @ W_v.T)[:, None]
    weights = helper_masked_softmax(
        qh @ kh.transpose(-2, -1) / math.sqrt(d // num_heads), mask=mask
    )
    return _merge(weights @ vh) @ W_o.T


def multi_query_changes_weights_in_place(q, k, v, W_q, W_k, W_v, W_o, num_heads, mask):
    out = multi_query_attention(q, k, v, W_q, W_k, W_v, W_o, num_heads, mask)
    W_q.mul_(1.0)  # touches the caller's weights
    return out


WRONG = [
    ("fold heads", fold_without_transpose, "no transpose: the heads must come before"),
    ("fold heads", fold_heads_first, "heads first: row b * num_heads + j"),
    ("fold heads", fold_with_the_helper, "calls helpers.attention.split_heads"),
    ("unfold heads", unfold_without_transpose, "no transpose"),
    ("unfold heads", unfold_with_view, "view size is not compatible"),
    ("packed multi-head attention", packed_mask_not_inverted, "True where a key is IGNORED"),
    ("packed multi-head attention", packed_mask_without_head_axis, "needs a head axis"),
    ("packed multi-head attention", packed_fills_without_head_axis, "needs a head axis"),
    ("packed multi-head attention", packed_scaled_by_d_model, "scaled by sqrt(d_model)"),
    ("packed multi-head attention", packed_untransposed_weights, "nn.Linear's weight is (out, in)"),
    ("packed multi-head attention", packed_across_heads, "attention ran across heads"),
    ("packed multi-head attention", packed_calls_torch, "calls torch.nn.MultiheadAttention"),
    (
        "packed multi-head attention",
        packed_calls_sdpa,
        "calls torch's scaled_dot_product_attention",
    ),
    ("multi-query attention", multi_query_scaled_by_d_model, "scaled by sqrt(d_model)"),
    ("multi-query attention", multi_query_without_mask, "the mask is not applied"),
    ("multi-query attention", multi_query_splits_without_transpose, "without the transpose"),
    (
        "multi-query attention",
        multi_query_changes_weights_in_place,
        "runs an in-place operation on its input `W_q`, which changes no value",
    ),
]


def test_the_packed_reference_is_torchs_layer():
    """The checker's reference equals torch.nn.MultiheadAttention itself, padding included."""
    torch.manual_seed(0)
    layer = nn.MultiheadAttention(8, 4, batch_first=True).eval()
    queries, keys, values = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 8)
    padding = torch.tensor([[False, False, False, True, True], [True, False, False, False, False]])
    expected, _ = layer(queries, keys, values, key_padding_mask=padding)
    got = packed_attention(
        queries,
        keys,
        values,
        layer.in_proj_weight,
        layer.in_proj_bias,
        layer.out_proj.weight,
        layer.out_proj.bias,
        4,
        padding,
    )
    torch.testing.assert_close(got, expected)


def test_multi_query_with_repeated_key_heads_is_multi_head_attention():
    """Multi-query attention equals multi-head attention whose key and value projections give
    every head the same rows."""
    from helpers.attention import MultiHeadAttention

    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 4, bias=False)
    W_k, W_v = torch.randn(2, 8), torch.randn(2, 8)
    with torch.no_grad():
        layer.W_k.weight.copy_(W_k.repeat(4, 1))
        layer.W_v.weight.copy_(W_v.repeat(4, 1))
    x = torch.randn(2, 5, 8)
    expected = layer(x, x, x)
    got = multi_query_attention(x, x, x, layer.W_q.weight, W_k, W_v, layer.W_o.weight, 4, None)
    torch.testing.assert_close(got, expected)
