import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import (
    AdditiveAttention,
    DotProductAttention,
    MultiHeadAttention,
    allowed_keys,
    copy_weights_from_torch,
    merge_heads,
    split_heads,
)
from helpers.masks import causal_mask, from_key_padding_mask, from_torch_attn_mask


def test_dot_product_attention_equals_torch_sdpa_with_masks():
    queries, keys, values = torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 5, 4)
    attention = DotProductAttention()
    lens = torch.tensor([2, 5])
    ours = attention(queries, keys, values, valid_lens=lens)
    mask = allowed_keys(torch.empty(2, 3, 5), valid_lens=lens)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(queries, keys, values, mask))
    assert attention.attention_weights.shape == (2, 3, 5)

    left_padded = torch.tensor([[False, True, True, True, True], [False, False, True, True, True]])
    mask = left_padded[:, None, :] & causal_mask(5)[2:]  # (2, 3, 5)
    ours = attention(queries, keys, values, mask=mask)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(queries, keys, values, mask))


def test_dot_product_attention_works_on_extra_axes():
    q, k, v = torch.randn(2, 4, 3, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 6)
    out = DotProductAttention()(q, k, v, valid_lens=torch.tensor([1, 5]))
    assert out.shape == (2, 4, 3, 6)
    torch.testing.assert_close(out[0], v[0, :, :1].expand(4, 3, 6))


def test_dot_product_attention_rejects_mismatched_sizes():
    with pytest.raises(ValueError, match="one size"):
        DotProductAttention()(torch.randn(2, 3, 8), torch.randn(2, 5, 4), torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="number of positions"):
        DotProductAttention()(torch.randn(2, 3, 8), torch.randn(2, 5, 8), torch.randn(2, 4, 4))


def test_additive_attention_takes_queries_and_keys_of_different_sizes():
    attention = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8)
    queries, keys, values = torch.randn(2, 1, 20), torch.randn(2, 10, 2), torch.randn(2, 10, 4)
    out = attention(queries, keys, values, valid_lens=torch.tensor([2, 6]))
    assert out.shape == (2, 1, 4)
    weights = attention.attention_weights
    assert (weights[0, :, 2:] == 0).all() and (weights[1, :, 6:] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 1))
    # the score is w_v . tanh(W_q q + W_k k): recompute it key by key for example 0
    scores = torch.stack(
        [
            attention.w_v(torch.tanh(attention.W_q(queries[0, 0]) + attention.W_k(k)))
            for k in keys[0]
        ]
    ).squeeze(-1)  # (10,)
    torch.testing.assert_close(weights[0, 0, :2], torch.softmax(scores[:2], dim=0))


def test_additive_attention_names_a_wrong_size():
    attention = AdditiveAttention(key_size=2, query_size=20, num_hiddens=8)
    with pytest.raises(ValueError, match="queries of size 3 given to AdditiveAttention built for"):
        attention(torch.randn(2, 1, 3), torch.randn(2, 10, 2), torch.randn(2, 10, 4))


def test_split_and_merge_heads_are_inverse_and_keep_each_head_contiguous():
    x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    heads = split_heads(x, 4)  # (2, 4, 3, 2)
    assert heads.shape == (2, 4, 3, 2)
    torch.testing.assert_close(heads[0, 1, 2], x[0, 2, 2:4])  # head 1 = features 2..3
    torch.testing.assert_close(merge_heads(heads), x)


def test_indivisible_heads_are_refused_clearly():
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by num_heads \(3\)"):
        MultiHeadAttention(10, 3)


def test_mask_of_unsupported_shape_is_refused_clearly():
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 4\) does not fit"):
        mha(x, x, x, mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="must be \\(B, n, d_model=8\\)"):
        mha(torch.randn(2, 3, 6), x, x)


def _pair(d_model, num_heads, bias):
    theirs = nn.MultiheadAttention(d_model, num_heads, bias=bias, batch_first=True).eval()
    ours = MultiHeadAttention(d_model, num_heads, bias=bias).eval()
    copy_weights_from_torch(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize(
    ("bias", "num_heads", "cross"), list(itertools.product([True, False], [1, 2, 4], [False, True]))
)
def test_multi_head_attention_equals_torch(bias, num_heads, cross):
    torch.manual_seed(num_heads)
    ours, theirs = _pair(8, num_heads, bias)
    batch, q_len, k_len = 3, 4, (6 if cross else 4)
    queries = torch.randn(batch, q_len, 8)
    keys = torch.randn(batch, k_len, 8) if cross else queries
    values = torch.randn(batch, k_len, 8) if cross else queries

    expected, expected_weights = theirs(queries, keys, values, average_attn_weights=False)
    torch.testing.assert_close(ours(queries, keys, values), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.attention_weights, expected_weights, atol=1e-6, rtol=1e-5)

    # key padding: right, left and in the middle
    key_padding = torch.zeros(batch, k_len, dtype=torch.bool)
    key_padding[0, -2:] = True
    key_padding[1, :1] = True
    key_padding[2, 2] = True
    expected, _ = theirs(queries, keys, values, key_padding_mask=key_padding)
    got = ours(queries, keys, values, mask=from_key_padding_mask(key_padding))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

    # attention masks of every shape torch takes: (q, k) and (B * heads, q, k)
    torch_mask = ~causal_mask(k_len)[-q_len:]  # True = not allowed, torch's convention
    expected, _ = theirs(queries, keys, values, attn_mask=torch_mask)
    got = ours(queries, keys, values, mask=from_torch_attn_mask(torch_mask))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

    per_head = torch.rand(batch * num_heads, q_len, k_len) < 0.3
    per_head[..., 0] = False  # every query keeps a key
    expected, _ = theirs(queries, keys, values, attn_mask=per_head)
    ours_mask = from_torch_attn_mask(per_head).reshape(batch, num_heads, q_len, k_len)
    torch.testing.assert_close(
        ours(queries, keys, values, mask=ours_mask), expected, atol=1e-5, rtol=1e-5
    )

    # (B, q, k) and valid lengths
    batch_mask = torch.rand(batch, q_len, k_len) < 0.7
    batch_mask[..., 0] = True
    expected, _ = theirs(
        queries, keys, values, attn_mask=~batch_mask.repeat_interleave(num_heads, 0)
    )
    torch.testing.assert_close(
        ours(queries, keys, values, mask=batch_mask), expected, atol=1e-5, rtol=1e-5
    )
    lens = torch.tensor([1, 3, k_len])
    expected, _ = theirs(
        queries, keys, values, key_padding_mask=torch.arange(k_len) >= lens[:, None]
    )
    torch.testing.assert_close(
        ours(queries, keys, values, valid_lens=lens), expected, atol=1e-5, rtol=1e-5
    )


def test_parameter_count_does_not_depend_on_heads():
    counts = {
        h: sum(p.numel() for p in MultiHeadAttention(64, h).parameters()) for h in (1, 2, 4, 8)
    }
    assert set(counts.values()) == {4 * 64 * 64 + 4 * 64}
