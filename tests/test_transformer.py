"""The encoder-decoder against torch.nn.Transformer, its masks, and greedy decoding."""

import pytest
import torch

from helpers.masks import causal_mask, convert_mask
from helpers.transformer import (
    Seq2SeqTransformer,
    copy_weights_from_torch_transformer,
    torch_transformer_like,
)

SRC = torch.tensor([[4, 5, 6, 7, 8, 9], [9, 10, 11, 0, 0, 0], [3, 4, 0, 0, 0, 0]])
TGT = torch.tensor([[1, 3, 4, 5, 6], [1, 6, 7, 0, 0], [1, 2, 0, 0, 0]])


def small_model(norm_first=True, num_layers=2, seed=0):
    torch.manual_seed(seed)
    return Seq2SeqTransformer(
        12, 9, d_model=32, num_heads=4, num_layers=num_layers, d_ff=64, norm_first=norm_first
    ).eval()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("num_layers", [1, 3])
def test_stacks_equal_torch_transformer(norm_first, num_layers):
    ours = small_model(norm_first, num_layers)
    theirs = torch_transformer_like(ours).eval()
    copy_weights_from_torch_transformer(ours, theirs)
    with torch.no_grad():
        src_embedded, tgt_embedded = ours.src_embedding(SRC), ours.tgt_embedding(TGT)
        memory, src_mask = ours.encode(SRC)
        ours_out = ours.decoder(
            tgt_embedded, memory, causal_mask(5) & (TGT != 0)[:, None, :], src_mask
        )
        theirs_out = theirs(
            src_embedded,
            tgt_embedded,
            tgt_mask=convert_mask(causal_mask(5), "allowed", "ignored"),
            src_key_padding_mask=SRC == 0,
            tgt_key_padding_mask=TGT == 0,
            memory_key_padding_mask=SRC == 0,
        )
        theirs_memory = theirs.encoder(src_embedded, src_key_padding_mask=SRC == 0)
    torch.testing.assert_close(memory, theirs_memory, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours_out, theirs_out, atol=1e-5, rtol=1e-5)


def test_the_causal_mask_holds_in_evaluation_mode():
    model = small_model()
    with torch.no_grad():
        logits = model(SRC, TGT)
        changed = TGT.clone()
        changed[:, 3:] = 8
        logits_changed = model(SRC, changed)
    torch.testing.assert_close(logits_changed[:, :3], logits[:, :3])
    assert not torch.allclose(logits_changed[0, 3:], logits[0, 3:], atol=1e-3)


def test_source_pads_change_nothing():
    model = small_model()
    with torch.no_grad():
        more_padding = torch.cat([SRC, torch.zeros(3, 4, dtype=torch.long)], dim=1)
        torch.testing.assert_close(model(more_padding, TGT), model(SRC, TGT))


@pytest.mark.parametrize("seed", range(6))
def test_greedy_decoding_with_a_cache_equals_decoding_without(seed):
    model = small_model(norm_first=seed % 2 == 0, seed=seed)
    with_cache = model.greedy_decode(SRC, bos_id=1, eos_id=2, max_steps=12, use_cache=True)
    without_cache = model.greedy_decode(SRC, bos_id=1, eos_id=2, max_steps=12, use_cache=False)
    assert torch.equal(with_cache, without_cache)
    assert not (with_cache[:, 0] == 0).any()  # a pad is never predicted


def test_greedy_decoding_stops_at_eos_and_pads_after_it():
    model = small_model()
    with torch.no_grad():
        model.output.bias.fill_(0)
        model.output.weight.fill_(0)
        model.output.bias[2] = 10.0  # <eos> always wins
    generated = model.greedy_decode(SRC, bos_id=1, eos_id=2, max_steps=12)
    assert generated.tolist() == [[2], [2], [2]]


def test_bad_input_gets_clear_errors():
    model = small_model()
    with pytest.raises(ValueError, match="outside the vocabulary 0..11"):
        model(torch.tensor([[3, 12]]), TGT[:1])
    with pytest.raises(ValueError, match="integer token ids"):
        model(torch.randn(1, 3), TGT[:1])
    with pytest.raises(ValueError, match="max_len is 256"):
        model(torch.ones(1, 300, dtype=torch.long), TGT[:1])
    with pytest.raises(ValueError, match="divisible by num_heads"):
        Seq2SeqTransformer(5, 5, d_model=30, num_heads=4)
