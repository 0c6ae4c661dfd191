"""Chapter 07, exercises: a pre-norm encoder block, a pre-norm decoder block with
cross-attention, and greedy decoding of a batch, written as a learner would (without the
helpers they re-implement)."""

from collections.abc import Callable

import torch


def pre_norm_encoder_block(
    x: torch.Tensor,
    mask: torch.Tensor,
    self_attention: Callable,
    ffn: Callable,
    norm1: Callable,
    norm2: Callable,
) -> torch.Tensor:
    """x (B, S, d_model), mask (B, 1, S) True at the non-pads -> (B, S, d_model)."""
    h = norm1(x)  # (B, S, d_model): the attention's input, normalised
    x = x + self_attention(h, h, h, mask=mask)  # the residual path stays as it was
    return x + ffn(norm2(x))  # (B, S, d_model)


def pre_norm_decoder_block(
    y: torch.Tensor,
    memory: torch.Tensor,
    tgt_mask: torch.Tensor,
    src_mask: torch.Tensor,
    self_attention: Callable,
    cross_attention: Callable,
    ffn: Callable,
    norm1: Callable,
    norm2: Callable,
    norm3: Callable,
) -> torch.Tensor:
    """y (B, T, d_model), memory (B, S, d_model), tgt_mask (B, T, T) causal, src_mask (B, 1, S)
    True at the source's non-pads -> (B, T, d_model)."""
    h = norm1(y)  # (B, T, d_model)
    y = y + self_attention(h, h, h, mask=tgt_mask)  # each position reads itself and before
    h = norm2(y)  # the queries are normalised; the memory is read as the encoder left it
    y = y + cross_attention(h, memory, memory, mask=src_mask)  # (B, T, d_model)
    return y + ffn(norm3(y))  # (B, T, d_model)


@torch.no_grad()
def greedy_decode(model, src: torch.Tensor, bos_id: int, eos_id: int, max_steps: int):
    """src (B, S) -> (B, steps) token ids: the most likely token at each step, <pad> after a
    sequence's <eos>, stopping once every sequence has written <eos>."""
    memory, src_mask = model.encode(src)  # (B, S, d_model), (B, 1, S): encoded once
    written = torch.full((len(src), 1), bos_id, dtype=torch.long)  # (B, 1): <bos>
    finished = torch.zeros(len(src), dtype=torch.bool)  # (B,)
    for _ in range(max_steps):
        logits = model.decode(written, memory, src_mask)[:, -1]  # (B, vocab): last position
        logits[:, [model.pad_id, bos_id]] = float("-inf")  # never written
        newest = logits.argmax(-1).masked_fill(finished, model.pad_id)  # (B,)
        written = torch.cat([written, newest[:, None]], dim=1)  # (B, steps so far + 1)
        finished = finished | (newest == eos_id)
        if finished.all():
            break
    return written[:, 1:]  # without the <bos>
