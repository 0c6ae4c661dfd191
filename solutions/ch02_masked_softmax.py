"""Chapter 02's exercises, solved as a learner would, without helpers.attention.masked_softmax.

1. masked_softmax: from a boolean mask of any broadcastable shape.
2. masked_mean: the mean over each example's valid positions.
3. top_k_softmax: a softmax over the k best valid keys of each row.
"""

import torch


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """scores (..., q, k); mask boolean, broadcastable to scores, True = may attend ->
    weights (..., q, k) of the scores' dtype, all zeros in a row with no allowed key."""
    allowed = mask & (scores != float("-inf"))  # (..., q, k): a -inf score allows nothing
    row_has_key = allowed.any(dim=-1, keepdim=True)  # (..., q, 1)
    # -inf is exact in every dtype; an empty row gets a finite dummy row, then zeros
    filled = scores.masked_fill(~allowed, float("-inf")).masked_fill(~row_has_key, 0.0)
    wide = filled.float() if scores.element_size() < 4 else filled  # 16-bit: sum in float32
    weights = torch.softmax(wide, dim=-1).to(scores.dtype)
    return weights.masked_fill(~row_has_key, 0.0)


def masked_mean(x: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """x (B, n, d), valid_lens (B,) -> (B, d): the mean of each example's valid positions."""
    keep = torch.arange(x.shape[1]) < valid_lens[:, None]  # (B, n)
    total = torch.where(keep[..., None], x, 0.0).sum(dim=1)  # (B, d): a pad adds exactly 0
    count = valid_lens.clamp(min=1)[:, None]  # (B, 1): 0 / 1 = 0 for an empty example
    return total / count.to(x.dtype)


def top_k_softmax(scores: torch.Tensor, valid_lens: torch.Tensor, k: int) -> torch.Tensor:
    """scores (B, q, n), valid_lens (B,) -> weights (B, q, n) on the k best valid keys."""
    n = scores.shape[-1]
    valid = torch.arange(n) < valid_lens[:, None, None]  # (B, 1, n)
    ranked = scores.masked_fill(~valid, float("-inf"))  # (B, q, n): pads can never be picked
    kth_best = ranked.topk(min(k, n), dim=-1).values[..., -1:]  # (B, q, 1)
    keep = valid & (ranked >= kth_best)  # (B, q, n)
    return masked_softmax(scores, keep)
