"""Losses and loops for training sequence models."""

import torch
import torch.nn.functional as F


def sequence_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int
) -> torch.Tensor:
    """Mean cross-entropy over the target positions that are not pads.

    logits (B, T, vocab), targets (B, T). A pad position still has an output row (its query
    attends like any other), but its target is not a token to predict: it counts for nothing.
    """
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (batch, T, vocab) and targets (batch, T): got {tuple(logits.shape)} "
            f"and {tuple(targets.shape)}"
        )
    if (targets == pad_id).all():
        raise ValueError("every target is a pad: there is nothing to compute a loss over")
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=pad_id)
