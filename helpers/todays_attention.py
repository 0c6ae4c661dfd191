"""Chapter 16: the attention inside today's open models.

Read top to bottom: softmax_with_sink (a learned sink logit per head, as gpt-oss ships), then
multi-head latent attention (DeepSeek-V2/V3): keys and values made from one small latent per
position, a rotated key part shared by every head, the absorbed form used when decoding, and
the LatentCache that holds only the latents and the rotated key parts. Each public function
checks its arguments once, at its door, with the guards at the bottom of this file.
"""

import dataclasses
import math

import torch
from torch import nn

from helpers import validation
from helpers.attention import _checked_masks, _masked_softmax, _merge_heads, _split_heads
from helpers.efficient import PUBLISHED_MODELS, ModelShape
from helpers.positional import _frequencies


def softmax_with_sink(
    scores: torch.Tensor, sink_logits: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax over the keys of (B, heads, q, k) scores with one more logit per head, the sink
    (sink_logits, (heads,)): it takes weight and brings no value, so each row sums to at most 1,
    and a head with nothing to gather can give its weight to the sink instead of to a token.
    mask: boolean, broadcastable to the scores, True where a query may attend to a key. A sink
    logit of -inf gives masked_softmax's weights; a row with every key masked is all zeros.
    Gradients reach the scores and the sink logits; 16-bit scores are normalised in float32."""
    mask = _check_sink_inputs(scores, sink_logits, mask)
    return _softmax_with_sink(scores, sink_logits, mask)


def _softmax_with_sink(scores, sink_logits, mask) -> torch.Tensor:
    sink = sink_logits.to(scores.dtype)[:, None, None].expand(*scores.shape[:-1], 1)  # (B, h, q, 1)
    joined = torch.cat([scores, sink], dim=-1)  # (B, heads, q, k + 1): the sink is the last key
    allowed = torch.ones_like(joined, dtype=torch.bool)
    if mask is not None:
        allowed[..., :-1] = mask.expand(scores.shape)
    return _masked_softmax(joined, None, allowed)[..., :-1]  # (B, heads, q, k)


def _turned(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """RoPE with a position per row: x (B, n, d) or (B, heads, n, d), positions (B, n) (a row's
    left pads get negative positions: they are never read). Chapter 11's rotation, pair by pair."""
    rates = _frequencies(x.shape[-1], 10000.0).to(x.device)  # (d / 2,), float64
    angles = positions.to(torch.float64)[..., None] * rates  # (B, n, d / 2)
    if x.dim() == 4:
        angles = angles[:, None]  # (B, 1, n, d / 2): the same for every head
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class LatentCache:
    """What multi-head latent attention keeps of the positions it has read: per position, the
    latent (d_latent) and the rotated key part (d_rope), side by side in one tensor
    (B, cached, d_latent + d_rope). Empty when made; each forward pass through it extends it."""

    def __init__(self):
        self.entries: torch.Tensor | None = None  # (B, cached, d_latent + d_rope)
        self.pads: torch.Tensor | None = None  # (B,): each row's left pads, fixed at the first pass

    def __len__(self) -> int:
        return 0 if self.entries is None else self.entries.shape[1]

    @property
    def nbytes(self) -> int:
        """The bytes the cache holds now."""
        return 0 if self.entries is None else self.entries.numel() * self.entries.element_size()

    def _extend(self, new: torch.Tensor) -> torch.Tensor:
        """Append new (B, n, d_latent + d_rope); return every entry, (B, cached + n, ...)."""
        self.entries = new if self.entries is None else torch.cat([self.entries, new], dim=1)
        return self.entries


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention whose keys and values come from one latent per position
    (DeepSeek-V2's multi-head latent attention), x (B, n, d_model) -> (B, n, d_model).

    Each position is projected down to a latent c (d_latent); head h's key and value are
    W_up_key[h] c and W_up_value[h] c (d_head each). RoPE cannot turn a key made from c without
    spoiling the cache (a rotation between W_up_key and the query would depend on the position),
    so a separate small key part k_rope (d_rope), shared by every head, is turned by its
    position, and each head's query has a turned part of the same size to match it:
    score = (q_content . W_up_key[h] c + q_rope . k_rope) / sqrt(d_head + d_rope).

    absorbed=True computes the same output in the form used when decoding: W_up_key[h] is folded
    into the query (q_content W_up_key[h] is a vector of size d_latent, scored against the
    latents themselves) and W_up_value[h] into the output projection, so no key or value is
    ever made from the cached latents. DeepSeek also projects the queries through a latent of
    their own; this layer projects them directly, which changes no cache.
    """

    def __init__(
        self, d_model: int, num_heads: int, d_latent: int, d_rope: int, d_head: int | None = None
    ):
        super().__init__()
        d_model, num_heads, d_latent, d_rope, d_head = _checked_latent_sizes(
            d_model, num_heads, d_latent, d_rope, d_head
        )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_head
        self.d_latent, self.d_rope = d_latent, d_rope
        self.W_q = nn.Linear(d_model, num_heads * (d_head + d_rope), bias=False)
        self.W_down = nn.Linear(d_model, d_latent, bias=False)  # the latent: all that is cached
        self.W_rope_key = nn.Linear(d_model, d_rope, bias=False)  # the shared rotated key part
        self.W_up_key = nn.Linear(d_latent, num_heads * d_head, bias=False)
        self.W_up_value = nn.Linear(d_latent, num_heads * d_head, bias=False)
        self.W_o = nn.Linear(num_heads * d_head, d_model, bias=False)
        self.attention_weights: torch.Tensor | None = None  # (B, heads, n, cached + n)

    def forward(
        self,
        x: torch.Tensor,
        cache: LatentCache | None = None,
        absorbed: bool = False,
        pads: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """x: (B, n, d_model), the positions after those the cache holds (all of them when
        cache is None). cache: a LatentCache this pass extends with x's latents and rotated
        key parts; feeding a sequence one position at a time through one cache gives the
        output of the full pass. pads: (B,) the left pads of each row, so that rows of different
        lengths share a batch (None: none); the same on every pass through one cache."""
        absorbed = _check_latent_input(self, x, cache, absorbed)
        pads = _checked_pads(pads, x, cache)
        return self._forward(x, cache, absorbed, pads)

    def _forward(self, x, cache, absorbed, pads) -> torch.Tensor:
        batch, n, _ = x.shape
        heads, d_head, d_rope = self.num_heads, self.d_head, self.d_rope
        start = 0 if cache is None else len(cache)
        slots = torch.arange(start, start + n, device=x.device)  # (n,): the new slots
        where = slots - pads[:, None]  # (B, n): each row's positions
        q = self.W_q(x).view(batch, n, heads, d_head + d_rope).transpose(1, 2)  # (B, h, n, dh+dr)
        q_content, q_rope = q.split([d_head, d_rope], dim=-1)
        q_rope = _turned(q_rope, where)
        new = torch.cat(
            [self.W_down(x), _turned(self.W_rope_key(x), where)], dim=-1
        )  # (B, n, dl+dr)
        if cache is not None:
            cache.pads = pads
        entries = new if cache is None else cache._extend(new)  # (B, N, d_latent + d_rope)
        latents, key_rope = entries.split([self.d_latent, d_rope], dim=-1)  # (B, N, dl), (B, N, dr)
        wide = torch.float32 if x.element_size() < 4 else x.dtype  # 16-bit products overflow
        q_rope, key_rope, latents, q_content = (
            t.to(wide) for t in (q_rope, key_rope, latents, q_content)
        )
        rope_scores = q_rope @ key_rope[:, None].transpose(-1, -2)  # (B, h, n, N)
        if absorbed:
            up_key = self.W_up_key.weight.to(wide).view(heads, d_head, self.d_latent)  # (h, dh, dl)
            q_latent = q_content @ up_key  # (B, h, n, d_latent): the query in the latents' space
            content_scores = q_latent @ latents[:, None].transpose(-1, -2)  # (B, h, n, N)
        else:
            keys = (latents @ self.W_up_key.weight.to(wide).T).view(batch, -1, heads, d_head)
            keys = keys.transpose(1, 2)  # (B, h, N, d_head)
            content_scores = q_content @ keys.transpose(-1, -2)  # (B, h, n, N)
        scores = (content_scores + rope_scores) / math.sqrt(d_head + d_rope)
        key_where = torch.arange(entries.shape[1], device=x.device) - pads[:, None]  # (B, N)
        allowed = _allowed_rows(where, key_where, None, 0)  # (B, n, N)
        weights = _masked_softmax(scores, None, allowed[:, None])  # (B, h, n, N)
        self.attention_weights = weights.detach()  # kept for figures, outside the graph
        if absorbed:
            mixed = weights @ latents[:, None]  # (B, h, n, d_latent)
            up_value = self.W_up_value.weight.to(wide).view(heads, d_head, self.d_latent)
            out = self.W_o.weight.to(wide).view(self.d_model, heads, d_head).transpose(0, 1)
            folded = out @ up_value  # (h, d_model, d_latent): W_o's part for head h, then W_uv
            return torch.einsum("bhnl,hml->bnm", mixed, folded).to(x.dtype)  # (B, n, d_model)
        values = (latents @ self.W_up_value.weight.to(wide).T).view(batch, -1, heads, d_head)
        mixed = weights @ values.transpose(1, 2)  # (B, h, n, d_head)
        return self.W_o(mixed.transpose(1, 2).reshape(batch, n, heads * d_head).to(x.dtype))


class RollingCache:
    """The keys (already turned by RoPE at their positions) and values one attention layer keeps
    of the slots it has read: all of them, or, with a window, only the last `window` and each
    row's first `keep` positions (the sink tokens StreamingLLM keeps). It never holds more than
    window + keep slots, or, when rows have different left pads, window + keep + the largest
    difference between two rows' pads. seen: how many slots have been read, so that the next
    is slot seen (a row's position: the slot less its pads), whatever was dropped."""

    def __init__(self, window: int | None = None, keep: int = 0):
        self.window, self.keep = _checked_window(window, keep)
        self.keys = self.values = None  # (B, kv_heads, held, d_head)
        self.slots = torch.zeros(0, dtype=torch.long)  # (held,): each held key's slot
        self.pads: torch.Tensor | None = None  # (B,): each row's left pads, fixed at the first pass
        self.seen = 0

    def __len__(self) -> int:
        return len(self.slots)

    def _extend(self, keys, values, slots, pads) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Append the new slots (a row's position is its slot less its left pads); return every
        key, value and slot this step reads, and keep only those a later step may read."""
        self.pads = pads
        if self.keys is not None:
            keys = torch.cat([self.keys, keys], dim=2)  # (B, kv_heads, held + n, d_head)
            values = torch.cat([self.values, values], dim=2)
            slots = torch.cat([self.slots.to(slots.device), slots])
        self.seen = int(slots[-1]) + 1
        kept = _readable_later(slots, self.seen, self.window, self.keep, pads)  # (held + n,)
        self.keys, self.values, self.slots = keys[:, :, kept], values[:, :, kept], slots[kept]
        return keys, values, slots


def _readable_later(slots, seen, window, keep, pads) -> torch.Tensor:
    """The slots some row may still read: the last `window`, and each row's first `keep`
    positions (a row's pads are never read)."""
    if window is None:
        return slots >= int(pads.min())
    first = (slots >= int(pads.min())) & (slots < int(pads.max()) + keep)
    return (slots >= seen - window) | first


def window_mask(query_positions, key_positions, window=None, keep=0) -> torch.Tensor:
    """(q, k) boolean, True where a query may read a key: the key is not after the query, and,
    with a window, is one of the `window` positions up to the query's or one of the first
    `keep` positions (a sliding window with sink tokens kept)."""
    _check_positions(query_positions, key_positions)
    window, keep = _checked_window(window, keep)
    return _allowed(query_positions.long(), key_positions.long(), window, keep)


def _allowed(query_positions, key_positions, window, keep) -> torch.Tensor:
    return _allowed_rows(query_positions[None], key_positions[None], window, keep)[0]


def _allowed_rows(query_positions, key_positions, window, keep) -> torch.Tensor:
    """(B, q, k) from each row's positions (B, q) and (B, k); a negative position is a pad."""
    distance = query_positions[:, :, None] - key_positions[:, None, :]  # (B, q, k)
    allowed = (distance >= 0) & (key_positions[:, None, :] >= 0)
    if window is not None:
        allowed = allowed & ((distance < window) | (key_positions[:, None, :] < keep))
    return allowed


class CausalSelfAttention(nn.Module):
    """The causal self-attention of today's open decoders, with the options they combine:
    key/value heads shared by groups of query heads (num_kv_heads: GQA, 1 is MQA), RoPE on
    every head, QK-norm (an RMSNorm over each head's queries and keys before they are scored,
    as OLMo 2, Qwen3 and Gemma 3 do), a learned sink logit per head (softmax_with_sink, as
    gpt-oss does), and a sliding window with the first `keep` positions always readable.
    x (B, n, d_model) -> (B, n, d_model); attention_weights (B, heads, n, keys read)."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        qk_norm: bool = False,
        sink: bool = False,
        window: int | None = None,
        keep: int = 0,
    ):
        super().__init__()
        d_model, num_heads, num_kv_heads, qk_norm, sink = _checked_attention_options(
            d_model, num_heads, num_kv_heads, qk_norm, sink
        )
        self.window, self.keep = _checked_window(window, keep)
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.d_head = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_head, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_head, bias=False)
        self.W_o = nn.Linear(d_model, d_model, bias=False)
        self.q_norm = nn.RMSNorm(self.d_head) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.d_head) if qk_norm else None
        self.sink_logits = nn.Parameter(torch.zeros(num_heads)) if sink else None
        self.attention_weights: torch.Tensor | None = None
        self.largest_score: torch.Tensor | None = None  # the largest |score| of the last pass

    def forward(
        self, x: torch.Tensor, cache: RollingCache | None = None, pads: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x: (B, n, d_model), the positions after those the cache has read (all of them when
        cache is None); the cache is extended with their keys and values. pads: (B,) the left
        pads of each row, so that rows of different lengths share a batch (None: none); the same
        on every pass through one cache."""
        _check_attention_input(self, x, cache)
        pads = _checked_pads(pads, x, cache)
        return self._forward(x, cache, pads)

    def _forward(self, x, cache, pads) -> torch.Tensor:
        batch, n, d_model = x.shape
        start = 0 if cache is None else cache.seen
        slots = torch.arange(start, start + n, device=x.device)  # (n,): the new slots
        where = slots - pads[:, None]  # (B, n): each row's positions
        q = _split_heads(self.W_q(x), self.num_heads)  # (B, heads, n, d_head)
        k = _split_heads(self.W_k(x), self.num_kv_heads)  # (B, kv_heads, n, d_head)
        v = _split_heads(self.W_v(x), self.num_kv_heads)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = _turned(q, where), _turned(k, where)
        key_slots = slots
        if cache is not None:
            k, v, key_slots = cache._extend(k, v, slots, pads)  # (B, kv_heads, read, d_head)
        group = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group, dim=1)  # (B, heads, read, d_head): head h reads h // group
        v = v.repeat_interleave(group, dim=1)
        wide = torch.float32 if q.element_size() < 4 else q.dtype  # 16-bit products overflow
        scores = (
            q.to(wide) @ k.to(wide).transpose(-1, -2) / math.sqrt(self.d_head)
        )  # (B, h, n, read)
        key_where = key_slots - pads[:, None]  # (B, read)
        allowed = _allowed_rows(where, key_where, self.window, self.keep)[
            :, None
        ]  # (B, 1, n, read)
        self.largest_score = scores.detach().masked_fill(~allowed, 0).abs().amax()
        if self.sink_logits is None:
            weights = _masked_softmax(scores, None, allowed)
        else:
            weights = _softmax_with_sink(scores, self.sink_logits, allowed)
        self.attention_weights = weights.detach()  # kept for figures, outside the graph
        return self.W_o(_merge_heads(weights.to(v.dtype) @ v))  # (B, n, d_model)

    def new_cache(self) -> RollingCache:
        """An empty cache with this layer's window and kept positions."""
        return RollingCache(self.window, self.keep)


def latent_cache_bytes(
    num_layers: int,
    d_latent: int,
    d_rope: int,
    tokens: int,
    batch: int = 1,
    bytes_per_number: int = 2,
) -> int:
    """The bytes of multi-head latent attention's cache: layers x (latent + rotated key part) x
    tokens x batch x bytes per number (2 for bfloat16). Compare chapter 10's kv_cache_bytes:
    2 x layers x key/value heads x head size x ..., which grows with the heads; this does not."""
    sizes = {
        "num_layers": num_layers,
        "d_latent": d_latent,
        "d_rope": d_rope,
        "tokens": tokens,
        "batch": batch,
        "bytes_per_number": bytes_per_number,
    }
    checked = {name: validation.whole_number(value, name) for name, value in sizes.items()}
    width = checked.pop("d_latent") + checked.pop("d_rope")
    return width * math.prod(checked.values())


@dataclasses.dataclass(frozen=True)
class LatentModelShape:
    """The sizes of a published model with multi-head latent attention that decide its cache."""

    name: str
    num_layers: int
    num_heads: int
    head_size: int  # of each head's content part (its queries, keys and values)
    d_latent: int
    d_rope: int
    context_length: int
    source: str

    def cache_bytes(self, tokens: int | None = None, batch: int = 1, bytes_per_number: int = 2):
        """The latent cache for `tokens` (default: the full context), in bfloat16."""
        tokens = self.context_length if tokens is None else tokens
        return latent_cache_bytes(
            self.num_layers, self.d_latent, self.d_rope, tokens, batch, bytes_per_number
        )


# Sizes as published: the papers' hyper-parameter sections and the models' configuration files.
PUBLISHED_LATENT_MODELS = (
    LatentModelShape(
        "DeepSeek-V2",
        num_layers=60,
        num_heads=128,
        head_size=128,
        d_latent=512,
        d_rope=64,
        context_length=131072,
        source="DeepSeek-AI 2024, DeepSeek-V2 (arXiv:2405.04434), section 3.1.1: 60 layers, "
        "128 heads of 128, KV compression dimension 512, decoupled key 64, context 128K; "
        "deepseek-ai/DeepSeek-V2 config.json (kv_lora_rank 512, qk_rope_head_dim 64)",
    ),
    LatentModelShape(
        "DeepSeek-V3",
        num_layers=61,
        num_heads=128,
        head_size=128,
        d_latent=512,
        d_rope=64,
        context_length=131072,
        source="DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437), section 4.2: "
        "61 layers, 128 heads of 128, KV compression dimension 512, decoupled key 64, context "
        "128K; deepseek-ai/DeepSeek-V3 config.json (kv_lora_rank 512, qk_rope_head_dim 64)",
    ),
)


FALCON_7B = ModelShape(  # the multi-query example: one key/value head for 71 query heads
    "Falcon-7B",
    num_layers=32,
    num_heads=71,
    num_kv_heads=1,
    head_size=64,
    context_length=2048,
    source="Almazrouei et al. 2023, The Falcon Series of Open Language Models (arXiv:2311.16867); "
    "tiiuae/falcon-7b config.json: hidden size 4544, 71 heads, 32 layers, multi_query true",
)


def cache_bytes_by_model(tokens: int | None = None, bytes_per_number: int = 2) -> list[dict]:
    """One row per published model (chapter 10's Llama 2 7B, Llama 2 70B and Mistral 7B,
    Falcon-7B, DeepSeek-V2 and V3): its attention, the bytes its cache holds per token per
    layer and per token, and for `tokens` (default: each model's context), in 16-bit numbers."""
    if tokens is not None:
        tokens = validation.whole_number(tokens, "tokens")
    bytes_per_number = validation.whole_number(bytes_per_number, "bytes_per_number")
    rows = []
    for shape in (*PUBLISHED_MODELS, FALCON_7B, *PUBLISHED_LATENT_MODELS):
        if isinstance(shape, LatentModelShape):
            kind, per_layer = "MLA", (shape.d_latent + shape.d_rope) * bytes_per_number
        else:
            kv = shape.num_kv_heads
            kind = "MHA" if kv == shape.num_heads else "MQA" if kv == 1 else "GQA"
            per_layer = 2 * kv * shape.head_size * bytes_per_number
        length = shape.context_length if tokens is None else tokens
        rows.append(
            {
                "model": shape.name,
                "attention": kind,
                "per token per layer": per_layer,
                "per token": per_layer * shape.num_layers,
                "tokens": length,
                "cache": shape.cache_bytes(length, bytes_per_number=bytes_per_number),
            }
        )
    return rows


ATTENTION_KINDS = ("as published", "MHA", "GQA", "MQA", "MLA")
GQA_KV_HEADS = 8  # Llama 2 70B's and Mistral 7B's key/value heads


def cache_bytes_per_token(shape, attention: str = "as published", bytes_per_number: int = 2):
    """The bytes one token adds to the cache of a published model's layers and heads (a
    ModelShape or a LatentModelShape) were its attention `attention`: "MHA" (a key and a value
    per head), "GQA" (8 key/value heads, or all of them where a model has fewer), "MQA" (one),
    "MLA" (a latent of 4 head sizes and a rotated key part of half one: DeepSeek's 512 and 64
    for heads of 128), or "as published" (the model's own)."""
    attention, bytes_per_number = _checked_cache_question(shape, attention, bytes_per_number)
    if attention == "as published":
        attention = "MLA" if isinstance(shape, LatentModelShape) else "kept"
    if attention == "MLA":
        if isinstance(shape, LatentModelShape):
            width = shape.d_latent + shape.d_rope
        else:
            width = 4 * shape.head_size + shape.head_size // 2
        return shape.num_layers * width * bytes_per_number
    kv_heads = {
        "kept": getattr(shape, "num_kv_heads", None),
        "MHA": shape.num_heads,
        "GQA": min(GQA_KV_HEADS, shape.num_heads),
        "MQA": 1,
    }[attention]
    return 2 * shape.num_layers * kv_heads * shape.head_size * bytes_per_number


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_sink_inputs(scores: object, sink_logits: object, mask: object) -> torch.Tensor | None:
    validation.dense_tensor(scores, "scores", "(B, heads, q, k)")
    if not scores.is_floating_point() or scores.dim() != 4:
        raise ValueError(
            f"scores must be floating point (B, heads, q, k), got {scores.dtype} "
            f"{tuple(scores.shape)}"
        )
    validation.dense_tensor(sink_logits, "sink_logits", "(heads,)")
    if not sink_logits.is_floating_point() or tuple(sink_logits.shape) != (scores.shape[1],):
        raise ValueError(
            f"sink_logits must be floating point, one per head: ({scores.shape[1]},), got "
            f"{sink_logits.dtype} {tuple(sink_logits.shape)}"
        )
    if sink_logits.device != scores.device:
        raise ValueError(
            f"sink_logits must be on the scores' device ({scores.device}), got {sink_logits.device}"
        )
    as_scores = sink_logits.to(scores.dtype)
    if as_scores.isnan().any() or (as_scores == float("inf")).any():
        raise ValueError(
            f"sink_logits hold NaN or +inf in the scores' dtype {scores.dtype} (a logit beyond "
            f"its largest number becomes inf): no weight could be given to any key"
        )
    _, mask = _checked_masks(scores.shape, scores.device, None, mask)
    return mask


MOST_SCORES = 2**28  # one pass's scores, rows x queries x keys (1 GiB of float32)


def _check_score_size(rows: int, queries: int, cached: int) -> None:
    if rows * queries * (cached + queries) > MOST_SCORES:
        raise ValueError(
            f"this pass would score {rows:,} rows (batch x heads) of {queries:,} queries against "
            f"{cached + queries:,} keys: more than 2^28 scores (1 GiB of float32); read the "
            f"sequence in shorter pieces through a cache"
        )


def _checked_pads(pads: object, x: torch.Tensor, cache: object) -> torch.Tensor:
    """pads as (B,) int64 on x's device (zeros for None), after checking that they are whole
    numbers >= 0 and the same as the cache's first pass had."""
    if pads is None:
        pads = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    validation.dense_tensor(pads, "pads", "(B,)")
    if pads.shape != (x.shape[0],) or pads.is_floating_point() or pads.dtype == torch.bool:
        raise ValueError(
            f"pads must be (B,) = ({x.shape[0]},) integers, each row's left pads, got "
            f"{pads.dtype} {tuple(pads.shape)}"
        )
    if (pads < 0).any():
        raise ValueError(f"pads must be >= 0, got {pads.tolist()}")
    pads = pads.to(device=x.device, dtype=torch.long)
    held = getattr(cache, "pads", None)
    if held is not None and not torch.equal(held, pads):
        raise ValueError(
            f"pads must be the same on every pass through one cache: it began with "
            f"{held.tolist()}, got {pads.tolist()}"
        )
    return pads


def _check_attention_input(layer, x: object, cache: object) -> None:
    validation.dense_tensor(x, "x", "(B, n, d_model)")
    d_model = layer.W_q.in_features
    if not x.is_floating_point() or x.dim() != 3 or x.shape[-1] != d_model or not x.numel():
        raise ValueError(
            f"x must be floating point (B, n, d_model = {d_model}), B and n at least 1, "
            f"got {x.dtype} {tuple(x.shape)}"
        )
    if x.dtype != layer.W_q.weight.dtype:
        raise ValueError(f"x must be of the layer's dtype {layer.W_q.weight.dtype}, got {x.dtype}")
    _check_score_size(x.shape[0] * layer.num_heads, x.shape[1], 0 if cache is None else len(cache))
    if cache is None:
        return
    if not isinstance(cache, RollingCache):
        raise TypeError(f"cache must be a RollingCache or None, got {type(cache).__name__}")
    if (cache.window, cache.keep) != (layer.window, layer.keep):
        raise ValueError(
            f"cache keeps window={cache.window}, keep={cache.keep}; the layer reads "
            f"window={layer.window}, keep={layer.keep}: make it with layer.new_cache()"
        )
    if cache.keys is not None and (
        cache.keys.shape[:2] != (x.shape[0], layer.num_kv_heads)
        or cache.keys.shape[3] != layer.d_head
        or cache.keys.dtype != x.dtype
    ):
        raise ValueError(
            f"the cache holds keys {tuple(cache.keys.shape)} {cache.keys.dtype}: x must "
            f"have its batch and dtype, the layer {layer.num_kv_heads} key/value heads of "
            f"{layer.d_head}"
        )


def _check_latent_input(layer, x: object, cache: object, absorbed: object) -> bool:
    validation.dense_tensor(x, "x", "(B, n, d_model)")
    if not x.is_floating_point() or x.dim() != 3 or x.shape[-1] != layer.d_model:
        raise ValueError(
            f"x must be floating point (B, n, d_model = {layer.d_model}), got {x.dtype} "
            f"{tuple(x.shape)}"
        )
    if not x.shape[0] or not x.shape[1]:
        raise ValueError(
            f"x must hold at least one sequence and one position, got {tuple(x.shape)}"
        )
    if x.dtype != layer.W_q.weight.dtype or x.device != layer.W_q.weight.device:
        raise ValueError(
            f"x must be of the layer's dtype and device ({layer.W_q.weight.dtype} on "
            f"{layer.W_q.weight.device}), got {x.dtype} on {x.device}"
        )
    if cache is not None:
        _check_cache(cache, x, layer.d_latent + layer.d_rope)
    cached = 0 if not isinstance(cache, LatentCache) else len(cache)
    _check_score_size(x.shape[0] * layer.num_heads, x.shape[1], cached)
    return validation.flag(absorbed, "absorbed")


def _check_positions(query_positions: object, key_positions: object) -> None:
    for name, positions in (("query_positions", query_positions), ("key_positions", key_positions)):
        validation.dense_tensor(positions, name, "(q,) or (k,)")
        if positions.dim() != 1 or positions.dtype not in (torch.int16, torch.int32, torch.int64):
            raise ValueError(
                f"{name} must be 1-d integer positions, got {positions.dtype} "
                f"{tuple(positions.shape)}"
            )


def _checked_window(window: object, keep: object) -> tuple[int | None, int]:
    if window is not None:
        window = validation.recipe_size(window, "window")
    keep = validation.whole_number(keep, "keep", minimum=0)
    if keep > validation.LARGEST_SIZE:
        raise ValueError(f"keep must be at most 2^31 - 1, got {validation.shown(keep)}")
    if keep and window is None:
        raise ValueError(f"keep ({keep}) only means something with a window: name one")
    return window, keep


def _checked_attention_options(d_model, num_heads, num_kv_heads, qk_norm, sink) -> tuple:
    d_model = validation.whole_number(d_model, "d_model")
    num_heads = validation.whole_number(num_heads, "num_heads")
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must divide into num_heads ({num_heads}) heads")
    if (d_model // num_heads) % 2:
        raise ValueError(f"each head's size must be even for RoPE, got {d_model // num_heads}")
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    num_kv_heads = validation.whole_number(num_kv_heads, "num_kv_heads")
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_kv_heads ({num_kv_heads}) must divide num_heads ({num_heads}): each key/value "
            f"head serves a group of query heads"
        )
    if d_model * d_model > validation.MOST_LAYER_WEIGHTS:
        raise ValueError(f"d_model {d_model} makes a projection of {d_model**2:,} weights")
    return (
        d_model,
        num_heads,
        num_kv_heads,
        validation.flag(qk_norm, "qk_norm"),
        validation.flag(sink, "sink"),
    )


def _checked_latent_sizes(d_model, num_heads, d_latent, d_rope, d_head) -> tuple:
    d_model = validation.whole_number(d_model, "d_model")
    num_heads = validation.whole_number(num_heads, "num_heads")
    d_latent = validation.whole_number(d_latent, "d_latent")
    d_rope = validation.whole_number(d_rope, "d_rope")
    if d_rope % 2:
        raise ValueError(f"d_rope must be even (RoPE turns pairs of dimensions), got {d_rope}")
    if d_head is None:
        if d_model % num_heads:
            raise ValueError(
                f"d_model ({d_model}) must divide into num_heads ({num_heads}) heads, or name "
                f"d_head"
            )
        d_head = d_model // num_heads
    d_head = validation.whole_number(d_head, "d_head")
    widest = max(
        d_model * num_heads * (d_head + d_rope), d_latent * num_heads * d_head, d_model * d_latent
    )
    if widest > validation.MOST_LAYER_WEIGHTS:
        raise ValueError(
            f"these sizes make a projection of {widest:,} weights, more than "
            f"{validation.MOST_LAYER_WEIGHTS:,}: a typing slip?"
        )
    return d_model, num_heads, d_latent, d_rope, d_head


def _check_cache(cache: object, x: torch.Tensor, width: int) -> None:
    if not isinstance(cache, LatentCache):
        raise TypeError(f"cache must be a LatentCache or None, got {type(cache).__name__}")
    if cache.entries is None:
        return
    held = cache.entries
    if held.shape[0] != x.shape[0] or held.shape[2] != width:
        raise ValueError(
            f"the cache holds (B={held.shape[0]}, cached, {held.shape[2]}) entries: x must have "
            f"its batch, and the layer its width d_latent + d_rope = {width}; got x "
            f"{tuple(x.shape)}"
        )
    if held.dtype != x.dtype or held.device != x.device:
        raise ValueError(
            f"the cache holds {held.dtype} on {held.device}; x is {x.dtype} on {x.device}"
        )


def _checked_cache_question(shape, attention, bytes_per_number) -> tuple[str, int]:
    if not isinstance(shape, ModelShape | LatentModelShape):
        raise TypeError(
            f"shape must be a ModelShape or a LatentModelShape, got {type(shape).__name__}"
        )
    sizes = ["num_layers", "num_heads", "head_size"]
    sizes += ["d_latent", "d_rope"] if isinstance(shape, LatentModelShape) else ["num_kv_heads"]
    for name in sizes:
        validation.whole_number(getattr(shape, name), f"shape.{name}")
    if isinstance(shape, ModelShape) and shape.num_heads % shape.num_kv_heads:
        raise ValueError(
            f"shape.num_kv_heads ({shape.num_kv_heads}) must divide shape.num_heads "
            f"({shape.num_heads})"
        )
    if not isinstance(attention, str) or attention not in ATTENTION_KINDS:
        raise ValueError(
            f"attention must be one of {ATTENTION_KINDS}, got {validation.shown(attention)}"
        )
    return attention, validation.whole_number(bytes_per_number, "bytes_per_number")
