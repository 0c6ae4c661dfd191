"""Chapter 08's exercises: one step of Bahdanau attention written from its weights."""

import torch


def alignment_scores(
    state: torch.Tensor,
    encoder_states: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w_v: torch.Tensor,
) -> torch.Tensor:
    """state (B, h), encoder_states (B, S, k) -> scores (B, S)."""
    query = state @ W_q.T  # (B, a)
    keys = encoder_states @ W_k.T  # (B, S, a)
    features = torch.tanh(query.unsqueeze(1) + keys)  # (B, S, a): one per source position
    return features @ w_v  # (B, S)


def alignment(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """scores (B, S), lengths (B,) -> weights (B, S), zero on the pads."""
    real = torch.arange(scores.shape[1]) < lengths.unsqueeze(1)  # (B, S)
    return scores.masked_fill(~real, float("-inf")).softmax(dim=-1)  # every length is >= 1


def context_vector(
    state: torch.Tensor,
    encoder_states: torch.Tensor,
    lengths: torch.Tensor,
    W_q: torch.Tensor,
    W_k: torch.Tensor,
    w_v: torch.Tensor,
) -> torch.Tensor:
    """-> context (B, k): the encoder states averaged with the alignment's weights."""
    weights = alignment(alignment_scores(state, encoder_states, W_q, W_k, w_v), lengths)
    return (weights.unsqueeze(-1) * encoder_states).sum(dim=1)  # (B, k)
