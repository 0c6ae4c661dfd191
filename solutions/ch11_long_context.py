"""Chapter 11's exercises, solved as a learner would: RoPE in the "rotate half" layout, causal
attention with ALiBi for queries that are the last positions, and causal linear attention
computed chunk by chunk with a carried state."""

import math

import torch
import torch.nn.functional as F


def rope_half_split(x, positions):
    """x (..., seq, d): dimension j pairs with j + d/2 and turns by position * 10000^(-2j/d)."""
    d = x.shape[-1]
    rates = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d / 2,)
    angles = positions.double()[:, None] * rates  # (seq, d / 2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., : d // 2], x[..., d // 2 :]  # (..., seq, d / 2) each
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


def slopes_for(num_heads):
    """Press et al.: 2^(-8h/n) for a power of two n; otherwise the power of two below, then
    every other slope of the next power of two."""
    below = 2 ** math.floor(math.log2(num_heads))
    powers = [2.0 ** (-8.0 * h / below) for h in range(1, below + 1)]
    doubled = [2.0 ** (-8.0 * h / (2 * below)) for h in range(1, 2 * below + 1)]
    return torch.tensor(powers + doubled[0::2][: num_heads - below])


def alibi_attention(queries, keys, values):
    """queries (B, heads, q, d) at the last q of k positions, keys (B, heads, k, d), values
    (B, heads, k, d_v) -> (B, heads, q, d_v); causal; ALiBi bias."""
    heads, num_queries, num_keys = queries.shape[1], queries.shape[2], keys.shape[2]
    query_positions = torch.arange(num_keys - num_queries, num_keys)  # (q,)
    distance = query_positions[:, None] - torch.arange(num_keys)[None, :]  # (q, k): i - j
    bias = -slopes_for(heads)[:, None, None] * distance  # (heads, q, k)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])  # (B, heads, q, k)
    scores = (scores + bias.to(scores.dtype)).masked_fill(distance < 0, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values  # (B, heads, q, d_v)


def chunked_linear_attention(queries, keys, values, chunk_size):
    """queries and keys (..., n, d), values (..., n, d_v) -> (..., n, d_v). Inside a chunk:
    the causal quadratic form; from earlier chunks: the carried sums S and z."""
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1  # (..., n, d)
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])  # (..., d, d_v)
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])  # (..., d)
    outputs = []
    for start in range(0, queries.shape[-2], chunk_size):
        q = phi_q[..., start : start + chunk_size, :]  # (..., c, d)
        k = phi_k[..., start : start + chunk_size, :]
        v = values[..., start : start + chunk_size, :]  # (..., c, d_v)
        inside = (q @ k.transpose(-2, -1)).tril()  # (..., c, c): keys j <= i in this chunk
        numerator = inside @ v + q @ state  # (..., c, d_v)
        denominator = inside.sum(-1, keepdim=True) + q @ normaliser[..., None]  # (..., c, 1)
        outputs.append(numerator / denominator)
        state = state + k.transpose(-2, -1) @ v  # add this chunk's phi(k) v^T
        normaliser = normaliser + k.sum(dim=-2)
    return torch.cat(outputs, dim=-2)  # (..., n, d_v)
