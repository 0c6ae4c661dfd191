"""Self-attention sees a set (permutation equivariance), and a causal layer run in one pass
equals the same layer run one token at a time with a key/value cache."""

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from helpers.attention import KeyValueCache, MultiHeadAttention
from helpers.masks import causal_mask


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    num_heads=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 10_000),
)
def test_self_attention_is_permutation_equivariant(n, num_heads, seed):
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    layer = MultiHeadAttention(8, num_heads).eval()
    x = torch.randn(2, n, 8, generator=generator)
    order = torch.randperm(n, generator=generator)
    with torch.no_grad():
        out = layer(x, x, x)
        out_of_permuted = layer(x[:, order], x[:, order], x[:, order])
    torch.testing.assert_close(out_of_permuted, out[:, order], atol=1e-5, rtol=1e-5)


def test_positions_break_the_equivariance():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 5, 8)
    positions = torch.randn(5, 8)
    order = torch.tensor([4, 3, 2, 1, 0])
    with torch.no_grad():
        out = layer(x + positions, x + positions, x + positions)
        shuffled = x[:, order] + positions
        out_of_shuffled = layer(shuffled, shuffled, shuffled)
    assert not torch.allclose(out_of_shuffled, out[:, order], atol=1e-3)


def run_with_cache(layer, x):
    """The causal layer one position at a time: each step sees only what came before."""
    cache = KeyValueCache()
    steps = [
        layer(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
        for t in range(x.shape[1])
    ]
    assert len(cache) == x.shape[1]
    return torch.cat(steps, dim=1)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 16),
    num_heads=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 10_000),
)
def test_causal_pass_equals_step_by_step_decoding_with_a_cache(n, num_heads, seed):
    torch.manual_seed(seed)
    layer = MultiHeadAttention(16, num_heads).double().eval()
    x = torch.randn(3, n, 16, dtype=torch.float64)
    with torch.no_grad():
        whole = layer(x, x, x, mask=causal_mask(n))
        one_by_one = run_with_cache(layer, x)
    torch.testing.assert_close(one_by_one, whole, atol=1e-12, rtol=0)


def test_cache_also_matches_in_float32():
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4).eval()
    x = torch.randn(2, 20, 32)
    with torch.no_grad():
        torch.testing.assert_close(run_with_cache(layer, x), layer(x, x, x, mask=causal_mask(20)))


def test_without_the_causal_mask_the_pass_sees_the_future():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 2).eval()
    x = torch.randn(1, 6, 16)
    with torch.no_grad():
        assert not torch.allclose(run_with_cache(layer, x), layer(x, x, x), atol=1e-3)


def test_a_cache_refuses_keys_of_another_shape():
    cache = KeyValueCache()
    cache.extend(torch.zeros(2, 4, 1, 8), torch.zeros(2, 4, 1, 8))
    with pytest.raises(ValueError, match="do not extend a cache"):
        cache.extend(torch.zeros(2, 2, 1, 8), torch.zeros(2, 2, 1, 8))


def test_a_rejected_call_leaves_the_cache_as_it_was():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).eval()
    cache = KeyValueCache()
    x = torch.randn(1, 1, 8)
    layer(x, x, x, cache=cache)
    with pytest.raises(ValueError, match="does not fit"):
        layer(x, x, x, mask=torch.ones(1, 5, dtype=torch.bool), cache=cache)
    assert len(cache) == 1


def test_several_new_positions_with_a_cache_need_a_mask():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 5, 8)
    with torch.no_grad():
        whole = layer(x, x, x, mask=causal_mask(5))
        cache = KeyValueCache()
        with pytest.raises(ValueError, match="need a causal mask of shape"):
            layer(x[:, :2], x[:, :2], x[:, :2], cache=cache)
        first = layer(x[:, :2], x[:, :2], x[:, :2], mask=causal_mask(2), cache=cache)
        rest = layer(x[:, 2:], x[:, 2:], x[:, 2:], mask=causal_mask(5)[2:], cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), whole)
