"""Chapter 05's exercises, solved as a learner would: positions that skip the pads, a distance
penalty on self-attention's scores, and a shift of the sinusoidal encoding by rotation."""

import math

import torch


def add_positions_skipping_pads(x, table, tokens, pad_id):
    """x (B, n, d) + table[p] for the real token number p of each sequence; pads unchanged."""
    real = tokens != pad_id  # (B, n)
    positions = real.long().cumsum(dim=1) - 1  # (B, n): 0 at the first real token
    positions = positions.clamp(min=0)  # pads before the first real token: any valid row
    rows = table[positions]  # (B, n, d): one table row per token
    return x + rows * real[..., None]  # (B, n, d): a pad gets nothing added


def distance_penalty(x, slope):
    """Self-attention without projections whose scores lose slope * |i - j|."""
    n, d = x.shape[1], x.shape[2]
    positions = torch.arange(n)
    distance = (positions[:, None] - positions[None, :]).abs()  # (n, n): |i - j|
    scores = x @ x.transpose(1, 2) / math.sqrt(d)  # (B, n, n)
    weights = torch.softmax(scores - slope * distance, dim=-1)  # (B, n, n), over the keys
    return weights @ x  # (B, n, d)


def shift_positions(rows, delta):
    """Turn each (sin, cos) pair j of rows (..., d) by the angle omega_j * delta."""
    d = rows.shape[-1]
    omega = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angle = omega * delta  # (d/2,)
    cos, sin = angle.cos().to(rows.dtype), angle.sin().to(rows.dtype)
    s, c = rows[..., 0::2], rows[..., 1::2]  # (..., d/2) each
    new_s = cos * s + sin * c  # sin(a + b) = sin a cos b + cos a sin b
    new_c = -sin * s + cos * c  # cos(a + b) = cos a cos b - sin a sin b
    return torch.stack([new_s, new_c], dim=-1).flatten(-2)  # (..., d), interleaved again
