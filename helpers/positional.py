"""Putting order into attention: sinusoidal positional encoding (and its learned alternative).

P[i, 2j] = sin(i * w_j) and P[i, 2j + 1] = cos(i * w_j), with frequencies w_j = 10000^(-2j/d).
Each pair of dimensions (2j, 2j + 1) is a point on the unit circle that turns by the angle
w_j at every step, so moving by delta positions is the same rotation at every position.
"""

import torch
from torch import nn

from helpers import validation


def frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(d_model / 2,): the angle w_j each sin/cos pair turns per position, from 1 down."""
    _, d_model = _check_sizes(1, d_model)
    return _frequencies(d_model, _checked_base(base))


def _frequencies(d_model: int, base: float) -> torch.Tensor:
    return base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(max_len, d_model): row i is the encoding of position i (float32)."""
    max_len, d_model = _check_sizes(max_len, d_model)
    return _sinusoidal_encoding(max_len, d_model, _checked_base(base))


def _sinusoidal_encoding(max_len: int, d_model: int, base: float) -> torch.Tensor:
    rates = _frequencies(d_model, base)  # (d_model / 2,)
    angles = torch.arange(max_len, dtype=torch.float64)[:, None] * rates
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
        start = _checked_start(self.encoding, x, start)
        return self.dropout(x + self.encoding[start : start + x.shape[1]].to(x.dtype))


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
) -> torch.Tensor:
    """Rotary position embedding (Su et al., 2021): x (..., seq, d) with each pair of
    dimensions (2j, 2j + 1) of row m turned by the angle m * w_j, w_j = base^(-2j/d) (the
    frequencies of the sinusoidal encoding). positions: (seq,), default 0 .. seq - 1.

    Applied to queries and keys, the score q_m . k_n then depends on m - n only (and on their
    content). The result has x's dtype; the angles are computed in float64.
    """
    positions = _check_rope_input(x, positions)
    return rotated(x, positions, _checked_base(base))


def rotated(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """apply_rope without its checks, for a caller whose own door checked x (positions (seq,)
    whole numbers, base > 1): MultiHeadAttention(rope=True) turns every head on every pass."""
    rates = _frequencies(x.shape[-1], base).to(x.device)  # (d / 2,), float64
    angles = positions.to(torch.float64)[:, None] * rates  # (seq, d / 2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., seq, d / 2) each
    turned = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return turned.flatten(-2)  # (..., seq, d): pairs interleaved again


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """(heads,): ALiBi's slopes (Press et al., 2022). For 2^p heads, the geometric sequence
    that starts at 2^(-8/heads) with that ratio (8 heads: 1/2, 1/4, ..., 1/256); for other
    counts, the paper's rule: the slopes of the largest power of two below, then every other
    slope of the next power of two, until there are num_heads."""
    return _alibi_slopes(validation.whole_number(num_heads, "num_heads"))


def _alibi_slopes(num_heads: int) -> torch.Tensor:
    def power_of_two(count: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / count) for h in range(count)]

    below = 1 << (num_heads.bit_length() - 1)  # the largest power of two <= num_heads
    slopes = power_of_two(below) + power_of_two(2 * below)[0::2][: num_heads - below]
    return torch.tensor(slopes, dtype=torch.float64).float()


def alibi_bias(num_heads: int, num_queries: int, num_keys: int) -> torch.Tensor:
    """(heads, q, k) float32: -slope_h * |distance| between query i and key j, to add to the
    scores. The queries are the last num_queries of the num_keys positions (decoding with a
    cache: q = 1 is the newest position), so with q = k the distance is i - j."""
    num_heads = validation.whole_number(num_heads, "num_heads")
    num_queries = validation.whole_number(num_queries, "num_queries")
    num_keys = validation.whole_number(num_keys, "num_keys")
    if num_queries > num_keys:
        raise ValueError(
            f"num_queries ({num_queries}) must be <= num_keys ({num_keys}): the queries are the "
            f"last positions of the keys"
        )
    return _alibi_bias(num_heads, num_queries, num_keys)


def _alibi_bias(num_heads: int, num_queries: int, num_keys: int) -> torch.Tensor:
    slopes = _alibi_slopes(num_heads)  # (heads,)
    query_positions = torch.arange(num_keys - num_queries, num_keys)  # (q,)
    distance = (query_positions[:, None] - torch.arange(num_keys)[None, :]).abs()  # (q, k)
    return -slopes[:, None, None] * distance.float()  # (heads, q, k)


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_sizes(max_len: int, d_model: int) -> tuple[int, int]:
    max_len = validation.whole_number(max_len, "max_len")
    d_model = validation.whole_number(d_model, "d_model")
    if d_model % 2:
        raise ValueError(f"d_model ({d_model}) must be even: dimensions come in sin/cos pairs")
    return max_len, d_model


def _checked_start(encoding: torch.Tensor, x: object, start: object) -> int:
    """start as an int, for embeddings x (B, n, d_model) of positions start .. start + n - 1
    that the encoding (max_len, d_model) covers."""
    max_len, d_model = encoding.shape
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
    return start


def _checked_base(base: object) -> float:
    if validation.positive_number(base, "base") <= 1:
        raise ValueError(f"base must be > 1 (the longest wavelength is 2 pi base), got {base!r}")
    return base


def _check_rope_input(x: object, positions: object) -> torch.Tensor:
    """positions as a tensor of x.shape[-2] whole numbers (0, 1, ... when None)."""
    validation.tensor(x, "x", "(..., seq, d)")
    if not x.is_floating_point():
        raise ValueError(f"x must be floating point, got {x.dtype}")
    if x.dim() < 2:
        raise ValueError(f"x must be (..., seq, d), got shape {tuple(x.shape)}")
    if x.shape[-1] % 2 or x.shape[-1] == 0:
        raise ValueError(
            f"the last axis of x ({x.shape[-1]}) must be even and > 0: RoPE turns pairs of "
            f"dimensions (2j, 2j + 1)"
        )
    seq = x.shape[-2]
    if positions is None:
        return torch.arange(seq, device=x.device)
    validation.tensor(positions, "positions", f"(seq={seq},)")
    if positions.dim() != 1 or positions.shape[0] != seq:
        raise ValueError(
            f"positions must be (seq,) = ({seq},), one per row of x, got {tuple(positions.shape)}"
        )
    if positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must be real numbers, got {positions.dtype}")
    if positions.is_floating_point() and not positions.isfinite().all():
        raise ValueError("positions must be finite, got inf or NaN")
    return positions.to(x.device)
