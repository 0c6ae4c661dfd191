"""Chapter 07's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.exercises import (
    check_greedy_decode,
    check_pre_norm_decoder_block,
    check_pre_norm_encoder_block,
)
from helpers.exercises.ch07_transformer import _greedy_model
from solutions.ch07_transformer import (
    greedy_decode,
    pre_norm_decoder_block,
    pre_norm_encoder_block,
)

CHECKERS = {
    "pre-norm decoder block": (check_pre_norm_decoder_block, pre_norm_decoder_block),
    "pre-norm encoder block": (check_pre_norm_encoder_block, pre_norm_encoder_block),
    "greedy decoding": (check_greedy_decode, greedy_decode),
}


def decoder_normalising_the_memory(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3):
    h = n1(y)
    y = y + attend(h, h, h, mask=tgt_mask)
    h, read = n2(y), n2(memory)  # the memory normalised a second time
    y = y + cross(h, read, read, mask=src_mask)
    return y + ffn(n3(y))


def decoder_without_causal_mask(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3):
    return pre_norm_decoder_block(y, memory, None, src_mask, attend, cross, ffn, n1, n2, n3)


def decoder_without_src_mask(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3):
    return pre_norm_decoder_block(y, memory, tgt_mask, None, attend, cross, ffn, n1, n2, n3)


def post_norm_decoder(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3):
    y = n1(y + attend(y, y, y, mask=tgt_mask))
    y = n2(y + cross(y, memory, memory, mask=src_mask))
    return n3(y + ffn(y))


def decoder_calling_the_tested_copy(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3):
    from helpers.transformer import DecoderBlock

    block = DecoderBlock(y.shape[-1], attend.num_heads, 16, norm_first=True)
    block.self_attention, block.cross_attention, block.ffn = attend, cross, ffn
    block.self_residual.norm, block.cross_residual.norm, block.ffn_residual.norm = n1, n2, n3
    return block(y, memory, tgt_mask, src_mask)


def post_norm_block(x, mask, self_attention, ffn, norm1, norm2):
    x = norm1(x + self_attention(x, x, x, mask=mask))
    return norm2(x + ffn(x))


def block_without_mask(x, mask, self_attention, ffn, norm1, norm2):
    h = norm1(x)
    x = x + self_attention(h, h, h)
    return x + ffn(norm2(x))


def block_with_one_norm(x, mask, self_attention, ffn, norm1, norm2):
    h = norm1(x)
    x = x + self_attention(h, h, h, mask=mask)
    return x + ffn(norm1(x))


def block_calling_the_tested_copy(x, mask, self_attention, ffn, norm1, norm2):
    from helpers.transformer import EncoderBlock

    block = EncoderBlock(x.shape[-1], self_attention.num_heads, 16, norm_first=True)
    block.self_attention, block.ffn = self_attention, ffn
    block.attention_residual.norm, block.ffn_residual.norm = norm1, norm2
    return block(x, mask)


def block_normalising_in_place(x, mask, self_attention, ffn, norm1, norm2):
    h = norm1(x)
    x += self_attention(h, h, h, mask=mask)  # changes the caller's x
    return x + ffn(norm2(x))


@torch.no_grad()
def greedy_without_pads(model, src, bos_id, eos_id, max_steps):
    memory, src_mask = model.encode(src)
    written = torch.full((len(src), 1), bos_id)
    for _ in range(max_steps):
        logits = model.decode(written, memory, src_mask)[:, -1]
        logits[:, [model.pad_id, bos_id]] = float("-inf")
        written = torch.cat([written, logits.argmax(-1, keepdim=True)], dim=1)
        if (written == eos_id).any(dim=1).all():
            break
    return written[:, 1:]


@torch.no_grad()
def greedy_stopping_at_the_first_eos(model, src, bos_id, eos_id, max_steps):
    memory, src_mask = model.encode(src)
    written = torch.full((len(src), 1), bos_id)
    finished = torch.zeros(len(src), dtype=torch.bool)
    for _ in range(max_steps):
        logits = model.decode(written, memory, src_mask)[:, -1]
        logits[:, [model.pad_id, bos_id]] = float("-inf")
        newest = logits.argmax(-1).masked_fill(finished, model.pad_id)
        written = torch.cat([written, newest[:, None]], dim=1)
        finished = finished | (newest == eos_id)
        if finished.any():  # bug: one finished sequence ends them all
            break
    return written[:, 1:]


def greedy_never_stopping(model, src, bos_id, eos_id, max_steps):
    written = greedy_decode(model, src, bos_id, eos_id, max_steps)
    rest = torch.full((len(src), max_steps - written.shape[1]), model.pad_id)
    return torch.cat([written, rest], dim=1)


def greedy_with_bos(model, src, bos_id, eos_id, max_steps):
    written = greedy_decode(model, src, bos_id, eos_id, max_steps)
    return torch.cat([torch.full((len(src), 1), bos_id), written], dim=1)


def greedy_calling_the_helper(model, src, bos_id, eos_id, max_steps):
    return model.greedy_decode(src, bos_id, eos_id, max_steps)


WRONG = [
    ("pre-norm decoder block", decoder_normalising_the_memory, "the memory is normalised too"),
    ("pre-norm decoder block", decoder_without_causal_mask, "the causal mask is missing"),
    ("pre-norm decoder block", decoder_without_src_mask, "the source's padding mask is missing"),
    ("pre-norm decoder block", post_norm_decoder, "that is post-norm"),
    ("pre-norm decoder block", decoder_calling_the_tested_copy, "calls DecoderBlock.forward"),
    ("pre-norm encoder block", post_norm_block, "that is post-norm"),
    ("pre-norm encoder block", block_without_mask, "the padding mask is missing"),
    ("pre-norm encoder block", block_with_one_norm, "the same LayerNorm twice"),
    ("pre-norm encoder block", block_calling_the_tested_copy, "calls EncoderBlock.forward"),
    ("pre-norm encoder block", block_normalising_in_place, "changes its input `x` in place"),
    ("greedy decoding", greedy_without_pads, "writes <pad> from then on"),
    ("greedy decoding", greedy_stopping_at_the_first_eos, "stop only when every sequence"),
    ("greedy decoding", greedy_never_stopping, "stop once every sequence has written <eos>"),
    ("greedy decoding", greedy_with_bos, "<bos> is the first input, not an output"),
    ("greedy decoding", greedy_calling_the_helper, "calls model.greedy_decode"),
]


def test_changing_the_layers_weights_in_place_is_refused(run_checker):
    def scales_a_norm(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3):
        with torch.no_grad():
            n3.weight.mul_(1.0)  # values unchanged, but written in place
            n3.weight.add_(0.5)
            n3.weight.sub_(0.5)
        return pre_norm_decoder_block(y, memory, tgt_mask, src_mask, attend, cross, ffn, n1, n2, n3)

    verdict, out = run_checker(check_pre_norm_decoder_block, scales_a_norm)
    assert not verdict and "changes the weights of" in out and "in place" in out, out
    verdict, out = run_checker(check_pre_norm_decoder_block, pre_norm_decoder_block)
    assert verdict, out  # the checker's layers were restored


def test_a_block_that_changes_a_norm_in_place_is_refused(run_checker):
    def resets_norm2(x, mask, self_attention, ffn, norm1, norm2):
        with torch.no_grad():
            norm2.bias.zero_()
        return pre_norm_encoder_block(x, mask, self_attention, ffn, norm1, norm2)

    verdict, out = run_checker(check_pre_norm_encoder_block, resets_norm2)
    assert not verdict and "changes the weights of" in out and "`norm2`" in out, out
    verdict, out = run_checker(check_pre_norm_encoder_block, pre_norm_encoder_block)
    assert verdict, out  # the checker's layers were restored


def test_the_greedy_reference_is_the_helpers_greedy_decode_with_and_without_the_cache():
    for seed, max_steps in ((0, 8), (11, 8), (11, 3)):
        model = _greedy_model(seed)
        src = torch.randint(3, 10, (5, 6), generator=torch.Generator().manual_seed(seed))
        mine = greedy_decode(model, src, 1, 2, max_steps)
        for use_cache in (True, False):
            theirs = model.greedy_decode(src, 1, 2, max_steps, use_cache=use_cache)
            assert torch.equal(mine, theirs)


def test_a_decoder_that_uses_the_cache_passes(run_checker):
    from helpers.attention import KeyValueCache

    @torch.no_grad()
    def with_cache(model, src, bos_id, eos_id, max_steps):
        memory, src_mask = model.encode(src)
        caches = [KeyValueCache() for _ in model.decoder.blocks]
        newest = torch.full((len(src), 1), bos_id)
        finished = torch.zeros(len(src), dtype=torch.bool)
        written = []
        for step in range(max_steps):
            y = model.decoder(
                model.tgt_embedding(newest, start=step), memory, None, src_mask, caches
            )
            logits = model.output(y[:, -1])
            logits[:, [model.pad_id, bos_id]] = float("-inf")
            newest = logits.argmax(-1, keepdim=True).masked_fill(finished[:, None], model.pad_id)
            written.append(newest)
            finished = finished | (newest[:, 0] == eos_id)
            if finished.all():
                break
        return torch.cat(written, dim=1)

    verdict, out = run_checker(check_greedy_decode, with_cache)
    assert verdict, out
