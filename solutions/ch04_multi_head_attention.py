"""Chapter 04, exercise 1: split and merge heads with unflatten, permute and flatten."""

import torch


def split(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, n, d_model) -> (B, heads, n, d_head)."""
    return x.unflatten(-1, (num_heads, -1)).permute(0, 2, 1, 3)  # (B, n, heads, d_head) first


def merge(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, n, d_head) -> (B, n, heads * d_head)."""
    return x.permute(0, 2, 1, 3).flatten(-2)  # (B, n, heads, d_head), then heads with d_head
