"""Chapter 08's exercises: the bottleneck's vector, the per-sentence loss, and one step of
Bahdanau attention written from its weights."""

import torch
import torch.nn.functional as F


def encoder_summary(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """states (B, S, 2h) of a bidirectional GRU, lengths (B,) -> (B, 2h)."""
    half = states.shape[-1] // 2
    rows = torch.arange(len(states))  # (B,)
    forward_end = states[rows, lengths - 1, :half]  # (B, h): after the last real token
    backward_end = states[:, 0, half:]  # (B, h): after reading back to the first token
    return torch.cat([forward_end, backward_end], dim=-1)


def sentence_losses(logits: torch.Tensor, targets: torch.Tensor, pad_id: int) -> torch.Tensor:
    """logits (B, T, V), targets (B, T) -> (B,): mean cross-entropy over each real target."""
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    real = (targets != pad_id).float()  # (B, T)
    return (per_token * real).sum(dim=1) / real.sum(dim=1)


def context_vector(
    state: torch.Tensor,
    encoder_states: torch.Tensor,
    lengths: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w_v: torch.Tensor,
) -> torch.Tensor:
    """state (B, h), encoder_states (B, S, k), lengths (B,) -> context (B, k)."""
    query = state @ W_q.T  # (B, a)
    keys = encoder_states @ W_k.T  # (B, S, a)
    scores = torch.tanh(query.unsqueeze(1) + keys) @ w_v  # (B, S)
    real = torch.arange(scores.shape[1]) < lengths.unsqueeze(1)  # (B, S)
    weights = scores.masked_fill(~real, float("-inf")).softmax(dim=-1)  # every length >= 1
    return (weights.unsqueeze(-1) * encoder_states).sum(dim=1)  # (B, k)
