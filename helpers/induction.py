"""Induction heads (chapter 13): what attention learns to do on sequences whose second half
repeats the first. A block of random tokens cannot be predicted the first time; the second time
it can, by a head that finds the earlier occurrence of the current token and copies the token
that followed it. This module holds the task (repeated_sequences), the two scores that measure
a head's attention pattern (previous_token_score, induction_score) and the ablation that
silences heads (zeroed_heads, logits_with_heads_zeroed).
"""

import contextlib
from collections.abc import Iterable, Iterator

import torch

from helpers import validation
from helpers.gpt import GPT

# The task


def repeated_sequences(
    batch: int, length: int, vocab_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, 2 * length) int64 ids: a block of `length` ids drawn uniformly from
    0..vocab_size - 1, followed by its exact copy."""
    batch = validation.whole_number(batch, "batch")
    length = validation.whole_number(length, "length")
    vocab_size = validation.whole_number(vocab_size, "vocab_size")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r:.80}")
    device = None if generator is None else generator.device
    block = torch.randint(vocab_size, (batch, length), generator=generator, device=device)
    return torch.cat([block, block], dim=1)  # (batch, 2 * length)


# The scores of an attention pattern


def _check_weights(weights: object) -> torch.Tensor:
    """Attention weights (..., n, n): a floating tensor, square in its last two dims, no NaN."""
    validation.tensor(weights, "weights", "(..., n, n)")
    if not weights.is_floating_point():
        raise ValueError(f"weights must be floating point attention weights, got {weights.dtype}")
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights must be (..., n, n), one row of key weights per query, got shape "
            f"{tuple(weights.shape)}"
        )
    if weights.isnan().any():
        where = tuple(weights.isnan().nonzero()[0].tolist())
        raise ValueError(f"weights hold NaN (first at index {where}): no score can be measured")
    return weights


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """weights (..., n, n), n >= 2 -> (...): the mean over the queries t = 1..n-1 of the weight
    on key t - 1, the previous token. An exact previous-token head scores 1."""
    _check_weights(weights)
    if weights.shape[-1] < 2:
        raise ValueError(
            f"weights must cover n >= 2 positions (the first has no previous token), got n = "
            f"{weights.shape[-1]}"
        )
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # (..., n - 1): (t, t - 1)
    return below.mean(-1)


def induction_score(weights: torch.Tensor, length: int) -> torch.Tensor:
    """weights (..., n, n) on a block of `length` tokens and its copy, n = 2 * length -> (...):
    the mean over the queries of the copy, t = length..2*length-1, of the weight on key
    t - length + 1, the token after the earlier occurrence of the current token. An exact
    induction head scores 1."""
    _check_weights(weights)
    length = validation.whole_number(length, "length")
    if weights.shape[-1] != 2 * length:
        raise ValueError(
            f"weights cover n = {weights.shape[-1]} positions, but a block of length {length} "
            f"and its copy are n = 2 * length = {2 * length}"
        )
    stripe = torch.diagonal(weights, offset=1 - length, dim1=-2, dim2=-1)  # t = length - 1..n - 1
    return stripe[..., 1:].mean(-1)  # the queries of the copy, t = length..n - 1


# Ablation: silence heads


def _head_pairs(model: GPT, heads: object) -> list[tuple[int, int]]:
    """heads as a list of (layer, head) pairs of whole numbers inside the model."""
    if isinstance(heads, str | bytes) or not isinstance(heads, Iterable):
        raise TypeError(
            f"heads must be an iterable of (layer, head) pairs such as [(0, 1)], got {heads!r:.80}"
        )
    config, pairs = model.config, []
    for pair in heads:
        if isinstance(pair, str | bytes) or not isinstance(pair, tuple | list) or len(pair) != 2:
            one_pair = " (for one head write [(layer, head)])" if isinstance(pair, int) else ""
            raise ValueError(
                f"heads must be (layer, head) pairs such as [(0, 1)], got the item {pair!r:.80}"
                f"{one_pair}"
            )
        layer = validation.whole_number(pair[0], "layer", minimum=0)
        head = validation.whole_number(pair[1], "head", minimum=0)
        if layer >= config.num_layers:
            raise ValueError(
                f"layer {layer} is out of range: the model has {config.num_layers} layers, "
                f"0..{config.num_layers - 1}"
            )
        if head >= config.num_heads:
            raise ValueError(
                f"head {head} is out of range: each layer has {config.num_heads} heads, "
                f"0..{config.num_heads - 1}"
            )
        pairs.append((layer, head))
    return pairs


def _zeroing_hook(zeroed_columns: torch.Tensor):
    """A forward pre-hook for W_o: its input, the merged heads (B, n, d_model), with the
    zeroed columns set to 0 (one new tensor; the caller's stays as it was)."""

    def hook(module, inputs):
        (merged, *rest) = inputs
        return (merged.masked_fill(zeroed_columns, 0.0), *rest)

    return hook


def zeroed_heads(model: GPT, heads: Iterable[tuple[int, int]]) -> contextlib.AbstractContextManager:
    """A context manager: while open, the output of each (layer, head) in `heads` is zero. W_o
    of that layer reads zeros in the head's columns head*d_head:(head+1)*d_head of the merged
    heads (laid out head after head, see helpers.attention.merge_heads); W_o's bias stays. No
    heads: no change. The arguments are checked here, at the call; the hooks are registered on
    entering and removed on leaving, also when the body raises."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    return _zeroing(model, _head_pairs(model, heads))


@contextlib.contextmanager
def _zeroing(model: GPT, pairs: list[tuple[int, int]]) -> Iterator[GPT]:
    d_head = model.config.d_model // model.config.num_heads
    by_layer: dict[int, set[int]] = {}
    for layer, head in pairs:
        by_layer.setdefault(layer, set()).add(head)
    handles = []
    try:
        for layer, layer_heads in by_layer.items():
            W_o = model.blocks[layer].attention.W_o
            zeroed = torch.zeros(model.config.d_model, dtype=torch.bool, device=W_o.weight.device)
            for head in layer_heads:
                zeroed[head * d_head : (head + 1) * d_head] = True
            handles.append(W_o.register_forward_pre_hook(_zeroing_hook(zeroed)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def logits_with_heads_zeroed(
    model: GPT, ids: torch.Tensor, heads: Iterable[tuple[int, int]]
) -> torch.Tensor:
    """model(ids) (B, T, vocab) with the given (layer, head) pairs' outputs zeroed, without
    gradients, in eval mode (the model's mode is restored afterwards)."""
    with zeroed_heads(model, heads):
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return model(ids)
        finally:
            model.train(was_training)
