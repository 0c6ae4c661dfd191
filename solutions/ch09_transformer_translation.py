"""Chapter 09's exercises: label smoothing over the tokens a translation can contain, one step
of batched beam search, and GNMT's length penalty."""

import torch


def smoothing_over_writable_tokens(
    logits: torch.Tensor,
    targets: torch.Tensor,
    pad_id: int,
    epsilon: float,
    never_written: list[int],
) -> torch.Tensor:
    """logits (B, T, V), targets (B, T) -> the mean loss over the non-pad positions, ()."""
    vocab = logits.shape[-1]
    writable = torch.ones(vocab, dtype=logits.dtype)  # (V,)
    writable[never_written] = 0.0
    one_hot = torch.nn.functional.one_hot(targets, vocab).to(logits.dtype)  # (B, T, V)
    q = (1 - epsilon) * one_hot + epsilon * writable / writable.sum()  # (B, T, V)
    per_position = -(q * logits.log_softmax(dim=-1)).sum(dim=-1)  # (B, T)
    real = targets != pad_id  # (B, T)
    return per_position[real].mean()


def beam_step(
    scores: torch.Tensor, log_probs: torch.Tensor, ended: torch.Tensor, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """scores (B, k), log_probs (B, k, V), ended (B, k) -> new_scores, beams, tokens (B, k)."""
    k, vocab = scores.shape[-1], log_probs.shape[-1]
    after_end = torch.full_like(log_probs[0, 0], float("-inf"))  # (V,)
    after_end[pad_id] = 0.0  # an ended hypothesis can only add a pad, at no cost
    log_probs = torch.where(ended.unsqueeze(-1), after_end, log_probs)  # (B, k, V)
    candidates = (scores.unsqueeze(-1) + log_probs).flatten(1)  # (B, k * V)
    new_scores, chosen = candidates.topk(k, dim=-1)  # (B, k) each, best first
    return new_scores, chosen // vocab, chosen % vocab  # which hypothesis, which token


def gnmt_length_penalty(
    scores: torch.Tensor, tokens: torch.Tensor, pad_id: int, alpha: float
) -> torch.Tensor:
    """scores (B, k), tokens (B, k, T) -> scores / ((5 + L) / 6) ** alpha, (B, k)."""
    lengths = (tokens != pad_id).sum(dim=-1).to(scores.dtype)  # (B, k): <eos> counts
    return scores / ((5 + lengths) / 6) ** alpha
