"""Chapter 05, exercise: the sinusoidal encoding written from its formula."""

import torch


def sinusoidal(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d_model): P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))."""
    positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    pairs = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,): 2j
    angles = positions / 10000 ** (pairs / d_model)  # (max_len, d/2)
    encoding = torch.empty(max_len, d_model, dtype=torch.float64)
    encoding[:, 0::2] = angles.sin()
    encoding[:, 1::2] = angles.cos()
    return encoding.float()
