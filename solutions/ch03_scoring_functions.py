"""Chapter 03, exercise 1: scaled dot-product attention on top of chapter 02's masked softmax."""

import math

import torch

from helpers.attention import masked_softmax


def dot_product_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    valid_lens: torch.Tensor | None,
) -> torch.Tensor:
    """queries (B, q, d), keys (B, k, d), values (B, k, d_v) -> (B, q, d_v)."""
    scores = queries @ keys.transpose(1, 2) / math.sqrt(queries.shape[-1])  # (B, q, k)
    weights = masked_softmax(scores, valid_lens)  # (B, q, k)
    return weights @ values  # (B, q, d_v)
