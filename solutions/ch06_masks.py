"""Chapter 06, exercise: a decoder's mask, causal and blind to pad keys, pads anywhere."""

import torch


def decoder_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """tokens (B, n) -> (B, n, n), True where query i may attend to key j."""
    n = tokens.shape[1]
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))  # (n, n): keys 0..i
    real_keys = (tokens != pad_id)[:, None, :]  # (B, 1, n): broadcast over the queries
    return causal & real_keys  # (B, n, n)
