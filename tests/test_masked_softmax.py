import math

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings

from helpers.attention import masked_softmax


def reference_masked_softmax(scores, allowed):
    """Row by row in float64: softmax over the allowed keys, zero elsewhere."""
    scores = np.asarray(scores, dtype=np.float64)
    allowed = np.broadcast_to(np.asarray(allowed, dtype=bool), scores.shape)
    out = np.zeros_like(scores)
    for index in np.ndindex(scores.shape[:-1]):
        keep = allowed[index]
        if keep.any():
            exps = np.exp(scores[index][keep] - scores[index][keep].max())
            out[index][keep] = exps / exps.sum()
    return out


def test_without_mask_is_plain_softmax():
    scores = torch.randn(2, 3, 5)
    torch.testing.assert_close(masked_softmax(scores), torch.softmax(scores, dim=-1))


def test_valid_lens_per_example():
    scores = torch.randn(2, 3, 4)
    weights = masked_softmax(scores, valid_lens=torch.tensor([2, 3]))
    allowed = torch.arange(4) < torch.tensor([2, 3])[:, None, None]
    expected = reference_masked_softmax(scores, allowed)
    np.testing.assert_allclose(weights.numpy(), expected, atol=1e-6)
    assert (weights[0, :, 2:] == 0).all() and (weights[1, :, 3:] == 0).all()


def test_valid_lens_per_query():
    scores = torch.randn(2, 3, 4)
    lens = torch.tensor([[1, 2, 3], [4, 0, 2]])
    weights = masked_softmax(scores, valid_lens=lens)
    allowed = torch.arange(4) < lens[..., None]
    np.testing.assert_allclose(
        weights.numpy(), reference_masked_softmax(scores, allowed), atol=1e-6
    )
    assert (weights[1, 1] == 0).all()


def test_valid_lens_broadcast_over_heads():
    scores = torch.randn(2, 4, 3, 5)  # (B, heads, q, k)
    weights = masked_softmax(scores, valid_lens=torch.tensor([1, 5]))
    assert (weights[0, :, :, 1:] == 0).all()
    torch.testing.assert_close(weights[1], torch.softmax(scores[1], dim=-1))
    per_query = masked_softmax(scores, valid_lens=torch.tensor([[1, 2, 3], [5, 5, 5]]))
    assert (per_query[0, :, 1, 2:] == 0).all() and (per_query[0, :, 1, :2] > 0).all()


def test_boolean_mask_broadcasts():
    scores = torch.randn(2, 3, 4)
    causal = torch.tril(torch.ones(3, 4, dtype=torch.bool))  # (queries, keys)
    weights = masked_softmax(scores, mask=causal)
    np.testing.assert_allclose(weights.numpy(), reference_masked_softmax(scores, causal), atol=1e-6)


def test_mask_and_valid_lens_combine():
    scores = torch.randn(1, 3, 4)
    causal = torch.tril(torch.ones(3, 4, dtype=torch.bool))
    weights = masked_softmax(scores, valid_lens=torch.tensor([2]), mask=causal)
    allowed = causal & (torch.arange(4) < 2)
    np.testing.assert_allclose(
        weights.numpy(), reference_masked_softmax(scores, allowed), atol=1e-6
    )


def test_fully_masked_row_is_zero_with_zero_gradient():
    scores = torch.randn(2, 2, 3, requires_grad=True)
    weights = masked_softmax(scores, valid_lens=torch.tensor([0, 3]))
    assert torch.equal(weights[0], torch.zeros(2, 3))
    (weights * torch.randn(2, 2, 3)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.equal(scores.grad[0], torch.zeros(2, 3))


def test_masked_keys_get_zero_gradient():
    scores = torch.randn(1, 2, 4, requires_grad=True)
    (masked_softmax(scores, valid_lens=torch.tensor([2])) ** 2).sum().backward()
    assert torch.equal(scores.grad[..., 2:], torch.zeros(1, 2, 2))
    assert (scores.grad[..., :2] != 0).any()


def test_input_is_not_modified():
    scores = torch.randn(2, 3, 4)
    before = scores.clone()
    masked_softmax(scores, valid_lens=torch.tensor([1, 2]), mask=torch.ones(3, 4, dtype=torch.bool))
    assert torch.equal(scores, before)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision(dtype):
    scores32 = torch.randn(3, 4, 6) * 4
    scores32[0, 0, 0] = 60000.0  # near float16's largest value: no overflow in the shift
    lens = torch.tensor([2, 6, 0])
    weights = masked_softmax(scores32.to(dtype), valid_lens=lens)
    assert weights.dtype == dtype
    assert torch.isfinite(weights).all()
    assert (weights[0, :, 2:] == 0).all() and (weights[2] == 0).all()
    expected = masked_softmax(scores32.to(dtype).float(), valid_lens=lens)
    torch.testing.assert_close(weights.float(), expected, atol=1e-2, rtol=0)


def test_large_negative_fill_would_overflow_float16():
    # why the helper fills with -inf: -1e9 is not representable in float16
    assert math.isinf(torch.tensor(-1e9, dtype=torch.float16).item())


@pytest.mark.parametrize(
    ("lens", "scores_shape"),
    [((3,), (2, 3, 4)), ((2, 4), (2, 3, 4)), ((2, 3, 1), (2, 3, 4)), ((2,), (4,))],
)
def test_valid_lens_of_wrong_shape_name_both_shapes(lens, scores_shape):
    with pytest.raises(ValueError, match=r"valid_lens of shape .* scores of shape"):
        masked_softmax(torch.randn(scores_shape), valid_lens=torch.ones(lens, dtype=torch.long))


def test_bad_valid_lens_values():
    with pytest.raises(ValueError, match=">= 0"):
        masked_softmax(torch.randn(2, 3), valid_lens=torch.tensor([1, -1]))
    with pytest.raises(ValueError, match="whole numbers"):
        masked_softmax(torch.randn(2, 3), valid_lens=torch.tensor([1.5, 2.0]))
    float_lens = masked_softmax(torch.zeros(1, 3), valid_lens=torch.tensor([2.0]))
    torch.testing.assert_close(float_lens, torch.tensor([[0.5, 0.5, 0.0]]))


def test_mask_that_cannot_broadcast_names_both_shapes():
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) cannot broadcast .* \(2, 3, 4\)"):
        masked_softmax(torch.randn(2, 3, 4), mask=torch.ones(3, 5, dtype=torch.bool))
    # a mask may not enlarge the scores either
    with pytest.raises(ValueError, match="cannot broadcast"):
        masked_softmax(torch.randn(3, 4), mask=torch.ones(2, 3, 4, dtype=torch.bool))


def test_mask_must_be_boolean():
    with pytest.raises(ValueError, match="boolean"):
        masked_softmax(torch.randn(3, 4), mask=torch.ones(3, 4))


def test_scores_must_be_floating():
    with pytest.raises(ValueError, match="floating-point"):
        masked_softmax(torch.ones(3, 4, dtype=torch.long))


@st.composite
def scores_and_mask(draw):
    batch, queries, keys = (draw(st.integers(1, 4)) for _ in range(3))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    scale = draw(st.sampled_from([0.1, 1.0, 30.0, 1000.0]))
    scores = torch.randn(batch, queries, keys, generator=generator) * scale
    kind = draw(st.sampled_from(["per_example", "per_query", "mask"]))
    if kind == "per_example":
        lens = torch.randint(0, keys + 2, (batch,), generator=generator)
        return scores, {"valid_lens": lens}, torch.arange(keys) < lens[:, None, None]
    if kind == "per_query":
        lens = torch.randint(0, keys + 1, (batch, queries), generator=generator)
        return scores, {"valid_lens": lens}, torch.arange(keys) < lens[..., None]
    mask = torch.rand(batch, queries, keys, generator=generator) < 0.6
    return scores, {"mask": mask}, mask


@settings(max_examples=200, deadline=None)
@given(scores_and_mask())
def test_properties(case):
    scores, kwargs, allowed = case
    allowed = allowed.expand_as(scores)
    weights = masked_softmax(scores, **kwargs)
    assert torch.isfinite(weights).all()
    assert (weights[~allowed] == 0).all(), "a masked key got weight"
    row_sums = weights.sum(-1)
    expected_sums = allowed.any(-1).to(weights.dtype)
    torch.testing.assert_close(row_sums, expected_sums)
    np.testing.assert_allclose(
        weights.numpy(), reference_masked_softmax(scores, allowed), atol=1e-5
    )
