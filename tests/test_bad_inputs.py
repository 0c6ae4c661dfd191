"""Inputs that once fooled the helpers: each now works or is refused with a message that names
what was expected (issue: inputs that cannot fool it)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import (
    AdditiveAttention,
    DotProductAttention,
    MultiHeadAttention,
    copy_weights_from_torch,
    masked_softmax,
    merge_heads,
    split_heads,
    weighted_sum,
)
from helpers.masks import causal_mask, padding_mask
from helpers.positional import sinusoidal_encoding
from helpers.transformer import Seq2SeqTransformer


def test_float16_attention_does_not_overflow_where_sdpa_does_not():
    q = (torch.randn(2, 16, 64) * 60).half()  # q . q is about 64 * 3600: past float16's 65504
    k = (torch.randn(2, 16, 64) * 60).half()
    v = torch.randn(2, 16, 64).half()
    for keys in (q, k):
        ours = DotProductAttention()(q, keys, v)
        assert ours.dtype == torch.float16 and ours.isfinite().all()
        torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, keys, v))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_attention_equals_sdpa_with_a_mask(dtype):
    q, k, v = (torch.randn(2, 3, 7, 16).to(dtype) for _ in range(3))
    mask = causal_mask(7)
    ours = DotProductAttention()(q, k, v, mask=mask)
    assert ours.dtype == dtype
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, reference, atol=2e-2, rtol=2e-2)


def test_a_row_whose_allowed_scores_are_all_minus_infinity_is_zero():
    scores = torch.tensor([[float("-inf"), float("-inf"), 1.0], [0.0, 1.0, 2.0]])
    scores.requires_grad_()
    weights = masked_softmax(scores, mask=torch.tensor([[True, True, False], [True] * 3]))
    assert weights[0].tolist() == [0.0, 0.0, 0.0]
    torch.testing.assert_close(weights[1], torch.softmax(scores[1], -1))
    weights.sum().backward()
    assert scores.grad.isfinite().all()
    assert masked_softmax(torch.full((2, 3), float("-inf"))).eq(0).all()  # no mask at all


def test_masked_values_cannot_leak_even_when_inf_or_nan():
    values = torch.randn(1, 4, 3)
    values[0, 3] = float("nan")  # a pad
    values[0, 2, 0] = float("inf")
    mask = causal_mask(4)[None]  # (1, 4, 4)
    queries = keys = torch.randn(1, 4, 3)
    out = DotProductAttention()(queries, keys, values, mask=mask)
    assert out[0, :2].isfinite().all()  # queries 0 and 1 never read keys 2 and 3
    assert out[0, 2, 0] == float("inf") and out[0, 2, 1:].isfinite().all()
    assert out[0, 3].isnan().all()  # query 3 reads the NaN: garbage in, garbage out
    padded = DotProductAttention()(queries, keys, values, valid_lens=torch.tensor([2]))
    assert padded.isfinite().all()


def test_weighted_sum_follows_ieee_for_the_keys_it_reads():
    values = torch.tensor([[float("inf")], [float("-inf")], [1.0]])
    both = torch.tensor([[0.5, 0.5, 0.0]])
    assert weighted_sum(both, values).isnan().all()  # inf - inf
    assert weighted_sum(torch.tensor([[0.0, 0.0, 1.0]]), values).item() == 1.0
    assert weighted_sum(torch.tensor([[0.2, 0.0, 0.8]]), values).item() == float("inf")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: masked_softmax(torch.randn(2, 3), valid_lens=torch.tensor([float("inf"), 1])),
            "finite whole numbers",
        ),
        (
            lambda: DotProductAttention()(
                torch.randn(1, 2, 4), torch.randn(1, 2, 4).double(), torch.randn(1, 2, 4)
            ),
            "share one dtype, got queries torch.float32, keys torch.float64",
        ),
        (
            lambda: DotProductAttention()(
                np.zeros((1, 2, 4)), torch.randn(1, 2, 4), torch.randn(1, 2, 4)
            ),
            "queries must be a torch.Tensor .* numpy array: convert it with torch.from_numpy",
        ),
        (
            lambda: AdditiveAttention(4, 4, 8)(
                torch.randn(1, 2, 4).int(), torch.randn(1, 2, 4), torch.randn(1, 2, 4)
            ),
            "queries must be floating point",
        ),
        (lambda: MultiHeadAttention(8, None), r"num_heads must be a whole number >= 1, got None"),
        (lambda: MultiHeadAttention(8, 2.5), r"num_heads must be a whole number >= 1, got 2.5"),
        (
            lambda: MultiHeadAttention(8, 2)(
                torch.randn(1, 3, 8).double(), *[torch.randn(1, 3, 8).double()] * 2
            ),
            "layer's weights are torch.float32",
        ),
        (lambda: causal_mask(2.5), "size must be a whole number >= 0, got 2.5"),
        (lambda: padding_mask(torch.tensor([[1, 0]]), None), "pad_id must be a whole number"),
        (
            lambda: split_heads(torch.randn(2, 3), 2),
            r"x must be \(B, n, d_model\), got \(2, 3\)",
        ),
        (
            lambda: split_heads(torch.randn(2, 3, 8), 3),
            r"d_model \(8\) must be divisible by num_heads \(3\)",
        ),
        (lambda: split_heads(torch.randn(2, 3, 8), 0), "num_heads must be a whole number >= 1"),
        (lambda: merge_heads(torch.randn(2, 3, 8)), r"x must be \(B, heads, n, d_head\)"),
        (lambda: Seq2SeqTransformer(10, 10, pad_id=None), "pad_id must be a whole number"),
        (lambda: Seq2SeqTransformer(10, 10, pad_id=12), "pad_id \\(12\\) must be an id of both"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_numpy_integers_are_sizes_like_any_other():
    assert causal_mask(np.int64(3)).shape == (3, 3)
    assert sinusoidal_encoding(np.int64(4), np.int32(8)).shape == (4, 8)
    assert MultiHeadAttention(np.int64(8), np.int64(2)).num_heads == 2
    assert split_heads(torch.randn(1, 2, 8), np.int64(4)).shape == (1, 4, 2, 2)


def test_copying_weights_between_different_bias_settings_is_refused():
    theirs = nn.MultiheadAttention(8, 2, bias=False, batch_first=True)
    with pytest.raises(ValueError, match="bias settings differ: ours bias=True, theirs bias=False"):
        copy_weights_from_torch(MultiHeadAttention(8, 2), theirs)


def test_greedy_decode_checks_its_tokens_and_runs_in_eval_mode():
    model = Seq2SeqTransformer(12, 12, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.5)
    src = torch.randint(3, 12, (2, 5))
    model.train()
    first = model.greedy_decode(src, 1, 2, max_steps=6)
    assert torch.equal(first, model.greedy_decode(src, 1, 2, max_steps=6))  # no dropout
    assert model.training  # the mode is given back
    for kwargs, message in (
        ({"bos_id": 1, "eos_id": 1}, "three different tokens"),
        ({"bos_id": 1, "eos_id": 12}, r"eos_id \(12\) is outside the target vocabulary"),
        ({"max_steps": -1}, "max_steps must be a whole number >= 1, got -1"),
    ):
        arguments = {"bos_id": 1, "eos_id": 2, "max_steps": 6, **kwargs}
        with pytest.raises(ValueError, match=message):
            model.greedy_decode(src, **arguments)


def test_float16_queries_of_300_stay_finite_like_sdpa():
    q = torch.full((1, 4, 64), 300.0).half()  # q . q = 5.8 million: past float16 even scaled
    v = torch.randn(1, 4, 64).half()
    ours = DotProductAttention()(q, q, v)
    assert ours.isfinite().all()
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, q, v))


def test_weighted_sum_follows_the_sign_of_each_weight():
    inf = float("inf")
    assert weighted_sum(torch.tensor([[-1.0]]), torch.tensor([[inf]])).item() == -inf
    assert weighted_sum(torch.tensor([[0.5, -0.5]]), torch.tensor([[inf], [inf]])).isnan().all()
    assert weighted_sum(torch.tensor([[float("nan")]]), torch.tensor([[inf]])).isnan().all()


def test_a_cache_refuses_keys_and_values_that_do_not_match():
    from helpers.attention import KeyValueCache

    with pytest.raises(ValueError, match="must have one shape"):
        KeyValueCache().extend(torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 5, 4))
    with pytest.raises(ValueError, match=r"keys must be \(B, heads, new, d_head\)"):
        KeyValueCache().extend(torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))


def test_copying_from_a_differently_built_torch_transformer_is_refused():
    from helpers.transformer import copy_weights_from_torch_transformer, torch_transformer_like

    ours = Seq2SeqTransformer(10, 10, d_model=16, num_heads=2, num_layers=1, d_ff=32)
    theirs = torch_transformer_like(Seq2SeqTransformer(10, 10, 16, 2, 1, 32, norm_first=False))
    before = ours.encoder.blocks[0].ffn.linear1.weight.clone()
    with pytest.raises(ValueError, match="norm_first ours True, theirs False"):
        copy_weights_from_torch_transformer(ours, theirs)
    assert torch.equal(ours.encoder.blocks[0].ffn.linear1.weight, before)  # nothing copied


def test_copying_from_torch_attention_with_extra_keys_is_refused():
    theirs = nn.MultiheadAttention(8, 2, add_bias_kv=True, batch_first=True)
    with pytest.raises(ValueError, match="adds extra keys"):
        copy_weights_from_torch(MultiHeadAttention(8, 2), theirs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: Seq2SeqTransformer(10, 10, norm_first="False"),
            "norm_first must be True or False",
        ),
        (lambda: Seq2SeqTransformer(10, 10, dropout="0.1"), "dropout must be a probability"),
        (lambda: MultiHeadAttention(8, 2, bias="no"), "bias must be True or False"),
        (lambda: AdditiveAttention(8, 6, 0), "num_hiddens must be a whole number >= 1, got 0"),
        (lambda: DotProductAttention(dropout=float("nan")), "dropout must be a probability"),
        (lambda: sinusoidal_encoding(5, 4, base=0.0), "base must be > 0"),
        (lambda: DotProductAttention()(*[torch.zeros(1, 2, 0)] * 3), "need a size of at least 1"),
    ],
)
def test_more_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_control_left_without_a_value_is_a_message_not_a_traceback():
    from helpers.widgets import HeadExplorer

    explorer = HeadExplorer()
    explorer.controls["head"].value = None
    assert explorer.state["error"] == "choose a value for head"
    explorer.controls["head"].value = 1
    assert "error" not in explorer.state


def test_without_scaling_the_projection_gradient_is_larger_but_carried_by_few_queries():
    from helpers.scoring import projection_gradients

    raw, scaled = projection_gradients(1024, scaled=False), projection_gradients(1024, scaled=True)
    assert raw["W_q"] > scaled["W_q"] and raw["W_k"] > scaled["W_k"]
    assert raw["starved"] > 0.5 and scaled["starved"] == 0
    assert raw["query_median"] < 1e-3 * scaled["query_median"]


def test_a_few_more_arguments_that_reached_torch_or_matplotlib_are_named():
    from helpers.kernel_regression import gaussian_kernel
    from helpers.plotting import show_heatmaps

    theirs = nn.MultiheadAttention(8, 2, batch_first=True)
    theirs.in_proj_weight = nn.Parameter(torch.zeros(20, 8))
    with pytest.raises(ValueError, match=r"in_proj_weight of shape \(20, 8\), expected"):
        copy_weights_from_torch(MultiHeadAttention(8, 2), theirs)
    with pytest.raises(ValueError, match="d must be a torch.Tensor"):
        gaussian_kernel([0.1, 0.2])
    with pytest.raises(ValueError, match="cmap 'nope' is not a matplotlib colormap"):
        show_heatmaps(torch.rand(2, 2), cmap="nope")


def test_a_boolean_mask_passed_as_valid_lens_is_named():
    from helpers.attention import masked_softmax

    scores = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="a boolean tensor is a mask, pass it by name as mask="):
        masked_softmax(scores, torch.ones(2, 3, 4, dtype=torch.bool))
