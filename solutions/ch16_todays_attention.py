"""Chapter 16's exercises, solved as a learner would: softmax with a sink logit per head,
multi-head latent attention's content scores in the absorbed form, and one decoding step of a
sliding-window cache held in a ring buffer."""

import math

import torch


def softmax_with_sink(scores, sink_logits):
    """scores (B, heads, q, k), sink_logits (heads,) -> weights (B, heads, q, k): softmax over
    the keys with exp(the head's sink logit) in each row's denominator."""
    sink = sink_logits[:, None, None]  # (heads, 1, 1): one logit per head, for all its rows
    largest = torch.maximum(scores.amax(dim=-1, keepdim=True), sink)  # (B, heads, q, 1)
    exps = torch.exp(scores - largest)  # (B, heads, q, k): no overflow, the sink's shift too
    total = exps.sum(dim=-1, keepdim=True) + torch.exp(sink - largest)  # (B, heads, q, 1)
    return exps / total  # each row sums to less than 1: the sink keeps the rest


def absorbed_scores(q_content, latents, W_up_key):
    """q_content (B, heads, n, d_head), latents (B, N, d_latent), W_up_key (heads * d_head,
    d_latent) -> the content scores (B, heads, n, N), no scale, with no key made."""
    heads, d_head = q_content.shape[1], q_content.shape[-1]
    up_key = W_up_key.view(heads, d_head, -1)  # (heads, d_head, d_latent): head h's rows
    q_latent = q_content @ up_key  # (B, heads, n, d_latent): the query in the latents' space
    return q_latent @ latents[:, None].mT  # (B, heads, n, d_latent) @ (B, 1, d_latent, N)


def ring_attention(query, key, value, ring_keys, ring_values, position):
    """query, key, value (B, heads, 1, d), rings (B, heads, window, d) -> (B, heads, 1, d):
    write the new key and value into the rings in place, then attend to the slots filled."""
    window = ring_keys.shape[2]
    slot = position % window  # the ring wraps around, over the oldest position
    ring_keys[:, :, slot] = key[:, :, 0]  # in place: the caller's ring keeps it for later steps
    ring_values[:, :, slot] = value[:, :, 0]
    filled = min(position + 1, window)  # the slots written so far
    keys, values = ring_keys[:, :, :filled], ring_values[:, :, :filled]  # (B, heads, filled, d)
    scores = query @ keys.mT / math.sqrt(query.shape[-1])  # (B, heads, 1, filled)
    return scores.softmax(dim=-1) @ values
