"""Putting order into attention: sinusoidal positional encoding (and its learned alternative).

P[i, 2j] = sin(i * w_j) and P[i, 2j + 1] = cos(i * w_j), with frequencies w_j = 10000^(-2j/d).
Each pair of dimensions (2j, 2j + 1) is a point on the unit circle that turns by the angle
w_j at every step, so moving by delta positions is the same rotation at every position.
"""

import torch
from torch import nn

from helpers import validation


def _check_sizes(max_len: int, d_model: int) -> tuple[int, int]:
    max_len = validation.whole_number(max_len, "max_len")
    d_model = validation.whole_number(d_model, "d_model")
    if d_model % 2:
        raise ValueError(f"d_model ({d_model}) must be even: dimensions come in sin/cos pairs")
    return max_len, d_model


def frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(d_model / 2,): the angle w_j each sin/cos pair turns per position, from 1 down."""
    _, d_model = _check_sizes(1, d_model)
    if validation.positive_number(base, "base") <= 1:
        raise ValueError(f"base must be > 1 (the longest wavelength is 2 pi base), got {base!r}")
    return base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(max_len, d_model): row i is the encoding of position i (float32)."""
    max_len, d_model = _check_sizes(max_len, d_model)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * frequencies(d_model, base)
    encoding = torch.empty(max_len, d_model, dtype=torch.float64)
    encoding[:, 0::2] = torch.sin(angles)  # (max_len, d_model / 2)
    encoding[:, 1::2] = torch.cos(angles)
    return encoding.float()


def offset_rotations(offset: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(d_model / 2, 2, 2): for each pair j, the matrix R with P[i + offset, pair j] =
    R @ P[i, pair j] for every position i. It depends on the offset, never on i."""
    if isinstance(offset, bool) or not isinstance(offset, int | float) or offset != offset:
        raise ValueError(f"offset must be a number of positions, got {offset!r}")
    angle = offset * frequencies(d_model, base)  # (d_model / 2,)
    cos, sin = torch.cos(angle), torch.sin(angle)
    rotations = torch.stack([torch.stack([cos, sin], -1), torch.stack([-sin, cos], -1)], -2)
    return rotations.float()


class PositionalEncoding(nn.Module):
    """Adds the sinusoidal encoding of each position to a batch of embeddings (B, n, d_model)."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(validation.probability(dropout))
        self.register_buffer("encoding", sinusoidal_encoding(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """x: (B, n, d_model) for positions start .. start + n - 1 (start > 0 when decoding
        one token at a time)."""
        max_len, d_model = self.encoding.shape
        validation.tensor(x, "x", f"(B, n, d_model={d_model})")
        if not x.is_floating_point():
            raise ValueError(f"x must be floating-point embeddings, got {x.dtype}")
        if x.dim() != 3 or x.shape[-1] != d_model:
            raise ValueError(f"x must be (B, n, d_model={d_model}), got {tuple(x.shape)}")
        start = validation.whole_number(start, "start", minimum=0)
        if start + x.shape[1] > max_len:
            raise ValueError(
                f"positions up to {start + x.shape[1] - 1} asked for, but the encoding was "
                f"built for max_len={max_len}"
            )
        return self.dropout(x + self.encoding[start : start + x.shape[1]].to(x.dtype))
