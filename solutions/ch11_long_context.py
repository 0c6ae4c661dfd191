"""Chapter 11's exercises, solved as a learner would: RoPE in the "rotate half" layout, causal
attention with ALiBi for queries that are the last positions, causal linear attention
computed chunk by chunk with a carried state, Linformer's attention over projected keys and
values, and one round of LSH attention in sorted chunks."""

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


def low_rank_attention(queries, keys, values, key_projection, value_projection):
    """queries (..., n_q, d), keys (..., n, d), values (..., n, d_v), projections (k, n) ->
    (..., n_q, d_v): softmax attention over the k projected keys and values."""
    projected_keys = key_projection @ keys  # (..., k, d)
    projected_values = value_projection @ values  # (..., k, d_v)
    scores = queries @ projected_keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    return torch.softmax(scores, dim=-1) @ projected_values  # (..., n_q, k) @ (..., k, d_v)


def lsh_attention_round(queries, values, buckets, chunk_size):
    """queries (..., n, d), values (..., n, d_v), buckets (..., n) -> (..., n, d_v): sort by
    bucket then position, attend within each chunk and the one before, put the outputs back."""
    n, d = queries.shape[-2:]
    chunks = n // chunk_size
    keys = queries / queries.norm(dim=-1, keepdim=True)  # shared: each key is its unit query
    order = (buckets * n + torch.arange(n)).argsort(dim=-1)  # (..., n): by bucket, then position

    def in_chunks(x):  # (..., n, e) -> (..., chunks, c, e), in sorted order
        x = x.gather(-2, order[..., None].expand(*order.shape, x.shape[-1]))
        return x.unflatten(-2, (chunks, chunk_size))

    def with_the_chunk_before(x):  # (..., chunks, c, e) -> (..., chunks, 2c, e)
        return x if chunks == 1 else torch.cat([x, x.roll(1, dims=-3)], dim=-2)

    q = in_chunks(queries)  # (..., chunks, c, d)
    k = with_the_chunk_before(in_chunks(keys))  # (..., chunks, 2c, d)
    v = with_the_chunk_before(in_chunks(values))  # (..., chunks, 2c, d_v)
    query_bucket = in_chunks(buckets[..., None])  # (..., chunks, c, 1)
    key_bucket = with_the_chunk_before(query_bucket).transpose(-2, -1)  # (..., chunks, 1, 2c)
    query_at = in_chunks(torch.arange(n).expand_as(buckets)[..., None])  # positions, (.., c, 1)
    key_at = with_the_chunk_before(query_at).transpose(-2, -1)  # (..., chunks, 1, 2c)
    others = (query_bucket == key_bucket) & (query_at != key_at)  # (..., chunks, c, 2c)
    allowed = torch.where(others.any(dim=-1, keepdim=True), others, query_at == key_at)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (..., chunks, c, 2c)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    output = (weights @ v).flatten(-3, -2)  # (..., n, d_v), in sorted order
    back = order.argsort(dim=-1)[..., None].expand_as(output)  # each position's sorted index
    return output.gather(-2, back)
