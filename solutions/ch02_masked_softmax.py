"""Chapter 02, exercise 1: masked softmax from valid lengths."""

import torch


def masked_softmax(scores: torch.Tensor, valid_lens: torch.Tensor) -> torch.Tensor:
    """scores (B, q, k); valid_lens (B,) or (B, q) -> weights (B, q, k), each row summing to 1
    over its first valid_len keys, and all zeros where valid_len is 0."""
    keys = torch.arange(scores.shape[-1])  # (k,)
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = keys < lens  # (B, 1 or q, k)
    row_has_key = allowed.any(dim=-1, keepdim=True)  # (B, 1 or q, 1)
    # -inf is exact in every dtype; an empty row gets a finite dummy row, then zeros
    filled = scores.masked_fill(~allowed, float("-inf")).masked_fill(~row_has_key, 0.0)
    return torch.softmax(filled, dim=-1).masked_fill(~row_has_key, 0.0)
