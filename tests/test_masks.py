"""The mask helpers and the one converter between mask conventions."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import MultiHeadAttention, copy_weights_from_torch, masked_softmax
from helpers.masks import (
    CONVENTIONS,
    build_mask,
    causal_mask,
    causal_padding_mask,
    convert_mask,
    from_key_padding_mask,
    from_torch_attn_mask,
    padding_mask,
)

PAD = 0
PADDED = torch.tensor([[5, 6, 7, 0, 0], [0, 0, 5, 6, 7], [5, 0, 6, 7, 8]])  # right, left, middle


def test_every_conversion_round_trips_and_means_the_same():
    allowed = torch.rand(2, 3, 4) > 0.4
    expected = {
        "allowed": allowed,
        "ignored": ~allowed,
        "additive": torch.zeros(2, 3, 4).masked_fill(~allowed, float("-inf")),
        "keep01": allowed.long(),
    }
    for source, target in itertools.product(CONVENTIONS, CONVENTIONS):
        converted = convert_mask(expected[source], source, target)
        assert torch.equal(converted, expected[target]), (source, target)
        assert converted.shape == allowed.shape


def test_converted_masks_give_the_same_attention_in_each_library():
    torch.manual_seed(0)
    allowed = padding_mask(PADDED, PAD)  # (3, 1, 5)
    q = k = v = torch.randn(3, 2, 5, 8)  # (B, heads, n, d_head)
    ours = masked_softmax(q @ k.mT / 8**0.5, mask=allowed[:, None]) @ v
    by_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
    additive = convert_mask(allowed, "allowed", "additive")[:, None]
    by_float = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
    torch.testing.assert_close(by_bool, ours)
    torch.testing.assert_close(by_float, ours)

    theirs = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    layer = MultiHeadAttention(16, 2).eval()
    copy_weights_from_torch(layer, theirs)
    x = torch.randn(3, 5, 16)
    ignore = convert_mask(PADDED != PAD, "allowed", "ignored")
    expected, _ = theirs(x, x, x, key_padding_mask=ignore)
    with torch.no_grad():
        torch.testing.assert_close(layer(x, x, x, mask=from_key_padding_mask(ignore)), expected)


def test_the_wrong_convention_attends_to_pads_and_turns_unpadded_rows_nan():
    theirs = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    tokens = torch.tensor([[5, 6, 0], [5, 6, 7]])
    x = torch.randn(2, 3, 8)
    _, weights = theirs(x, x, x, key_padding_mask=tokens != PAD)  # the bug
    assert torch.allclose(weights[0, :, 2], torch.ones(3))
    assert weights[1].isnan().all()


def test_conversions_refuse_what_does_not_fit_their_convention():
    with pytest.raises(ValueError, match="must be boolean"):
        convert_mask(torch.ones(3), "allowed")
    with pytest.raises(ValueError, match="only 0 .attend. and -inf"):
        convert_mask(torch.tensor([0.0, 1.0]), "additive")
    with pytest.raises(ValueError, match="holds numbers, got a boolean"):
        convert_mask(torch.tensor([True]), "keep01")
    with pytest.raises(ValueError, match="only 0 and 1"):
        convert_mask(torch.tensor([0, 2]), "keep01")
    with pytest.raises(ValueError, match="unknown mask convention 'True=keep'"):
        convert_mask(torch.tensor([True]), "True=keep")
    with pytest.raises(ValueError, match="boolean"):
        from_key_padding_mask(torch.zeros(2, 3))
    assert from_torch_attn_mask(torch.tensor([0.0, float("-inf")])).tolist() == [True, False]
    assert from_torch_attn_mask(torch.tensor([False, True])).tolist() == [True, False]


def test_padding_masks_handle_pads_anywhere():
    mask = padding_mask(PADDED, PAD)
    assert mask.shape == (3, 1, 5)
    assert mask[:, 0].tolist() == [
        [True, True, True, False, False],
        [False, False, True, True, True],
        [True, False, True, True, True],
    ]
    with pytest.raises(ValueError, match="tokens must be .B, n."):
        padding_mask(torch.tensor([1, 2, 0]), PAD)


def test_decoder_mask_is_causal_and_blind_to_pad_keys():
    mask = causal_padding_mask(PADDED, PAD)
    assert mask.shape == (3, 5, 5)
    assert not mask.triu(1).any()
    assert not mask[PADDED[:, None, :].expand(-1, 5, -1) == PAD].any()
    assert mask[1, :2].sum() == 0  # left padding: the pad queries have no key at all
    assert torch.equal(causal_mask(3), torch.tril(torch.ones(3, 3)).bool())


def test_fully_masked_rows_stay_finite_through_two_layers():
    torch.manual_seed(0)
    layer = MultiHeadAttention(8, 2).eval()
    mask = causal_padding_mask(torch.tensor([[0, 5, 6, 7]]), PAD)
    x = torch.randn(1, 4, 8)
    with torch.no_grad():
        out = layer(x, x, x, mask=mask)
        out = layer(out, out, out, mask=mask)
    assert torch.isfinite(out).all()
    assert (layer.attention_weights[0, :, 0] == 0).all()


def test_build_mask_kinds():
    target, source = "a _ b".split(), "x y _ z".split()
    assert build_mask(target, source, "cross-attention").tolist() == [[True, True, False, True]] * 3
    assert build_mask(target, source, "padding + causal").tolist() == [
        [True, False, False],
        [True, False, False],
        [True, False, True],
    ]
    with pytest.raises(ValueError, match="kind must be one of"):
        build_mask(target, source, "diagonal")
