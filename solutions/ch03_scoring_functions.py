"""Chapter 03's exercises, worked: each builds on chapter 02's masked softmax and nothing else
from helpers.attention."""

import math

import torch

from helpers.attention import masked_softmax


def attend(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exercise 1. queries (B, q, d), keys (B, k, d), values (B, k, d_v), mask broadcastable to
    (B, q, k), True where a query may attend -> output (B, q, d_v), weights (B, q, k)."""
    d = queries.shape[-1]
    scores = queries @ keys.transpose(1, 2) / (math.sqrt(d) * temperature)  # (B, q, k)
    weights = masked_softmax(scores, mask=mask)  # (B, q, k)
    return weights @ values, weights  # (B, q, d_v), (B, q, k)


def general_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    W: torch.Tensor,
    valid_lens: torch.Tensor | None,
) -> torch.Tensor:
    """Exercise 2, Luong's "general" score. queries (B, q, d_q), keys (B, k, d_k),
    values (B, k, d_v), W (d_q, d_k) -> (B, q, d_v)."""
    scores = (queries @ W) @ keys.transpose(1, 2)  # (B, q, d_k) @ (B, d_k, k) = (B, q, k)
    return masked_softmax(scores, valid_lens) @ values  # (B, q, d_v)


def additive_step(
    state: torch.Tensor,
    projected_keys: torch.Tensor,
    values: torch.Tensor,
    W_q: torch.Tensor,
    w_v: torch.Tensor,
    valid_lens: torch.Tensor,
) -> torch.Tensor:
    """Exercise 3, one decoder step of additive attention. state (B, d_q),
    projected_keys (B, k, h), values (B, k, d_v), W_q (h, d_q), w_v (h,) -> (B, d_v)."""
    projected_state = state @ W_q.T  # (B, h)
    features = torch.tanh(projected_state.unsqueeze(1) + projected_keys)  # (B, k, h)
    scores = features @ w_v  # (B, k)
    weights = masked_softmax(scores, valid_lens)  # (B, k)
    return (weights.unsqueeze(-1) * values).sum(dim=1)  # (B, d_v)
