"""Attention weights and the modules that compute them.

Read top to bottom: masked_softmax (chapter 02), the weighted sum of values, the two scoring
functions as modules (DotProductAttention, AdditiveAttention; chapter 03), splitting and merging
heads and MultiHeadAttention (chapter 04, with grouped-query attention from chapter 10), and the
KeyValueCache it decodes with (chapter 06). Each public function checks its arguments once, at
its door, with the guards at the bottom of this file; what it calls inside trusts them.

Mask convention, everywhere in this project: a boolean mask is True where a
query may attend to a key (as the boolean ``attn_mask`` of
``torch.nn.functional.scaled_dot_product_attention``).
"""

import math

import torch
from torch import nn

from helpers import validation
from helpers.positional import rotated


def masked_softmax(
    scores: torch.Tensor, valid_lens: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax over the last axis, giving exactly zero weight to the keys not allowed.

    scores: ``(B, ..., q, k)``, floating point.
    valid_lens: ``(B,)`` or ``(B, q)``; key j is allowed when j < valid_len.
    mask: boolean, broadcastable to ``scores``, True where a query may attend to a key.

    A score of -inf allows nothing either, so a row with no allowed key, or whose allowed
    scores are all -inf, returns all zeros (not NaN, not a uniform row) with zero gradient.
    The input is not modified; the result has the input's dtype (16-bit scores are
    normalised in float32).
    """
    _check_scores(scores)
    valid_lens, mask = _checked_masks(scores.shape, scores.device, valid_lens, mask)
    return _masked_softmax(scores, valid_lens, mask)


def _masked_softmax(scores, valid_lens, mask) -> torch.Tensor:
    allowed = _allowed_keys(scores, valid_lens, mask) & (scores != float("-inf"))
    row_has_key = allowed.any(dim=-1, keepdim=True)
    # -inf is exact in every dtype (a fill of -1e9 overflows float16); rows with no
    # allowed key get a finite dummy row so that softmax gives no NaN, then zeros.
    filled = scores.masked_fill(~allowed, float("-inf")).masked_fill(~row_has_key, 0.0)
    wide = torch.float32 if scores.element_size() < 4 else None
    weights = torch.softmax(filled, dim=-1, dtype=wide).to(scores.dtype)
    return weights.masked_fill(~row_has_key, 0.0)


def allowed_keys(
    scores: torch.Tensor, valid_lens: torch.Tensor | None = None, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The boolean mask (True = may attend) that valid_lens and mask leave, broadcast to scores."""
    _check_scores(scores)
    valid_lens, mask = _checked_masks(scores.shape, scores.device, valid_lens, mask)
    return _allowed_keys(scores, valid_lens, mask)


def _allowed_keys(scores, valid_lens, mask) -> torch.Tensor:
    allowed = torch.ones_like(scores, dtype=torch.bool)  # (B, ..., q, k)
    if valid_lens is not None:
        allowed = allowed & _first_keys(valid_lens, scores)
    if mask is not None:
        allowed = allowed & mask
    return allowed


def _first_keys(valid_lens: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """The mask, broadcastable to scores (B, ..., q, k), that keeps the first valid_len keys:
    valid_lens (B,) holds one length per example, (B, q) one per query."""
    batch = scores.shape[0]
    middle = (1,) * (scores.dim() - 1 - valid_lens.dim())
    if valid_lens.dim() == 1:
        lens = valid_lens.reshape(batch, *middle, 1)  # (B, 1, ..., 1)
    else:
        lens = valid_lens.reshape(batch, *middle, scores.shape[-2], 1)  # (B, 1, ..., q, 1)
    key_positions = torch.arange(scores.shape[-1], device=scores.device)  # (keys,)
    return key_positions < lens.to(scores.device)


def weighted_sum(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """weights @ values, in which a key of weight 0 contributes nothing, even a value of inf
    or NaN (a plain product gives 0 * inf = NaN, so a masked key would leak into the output).

    weights (..., q, k), values (..., k, d_v) -> (..., q, d_v). A non-finite value at a key
    that is read (weight not 0) reaches the output by the rules of IEEE arithmetic.
    """
    _check_weighted_sum(weights, values)
    return _weighted_sum(weights, values)


def _weighted_sum(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    output = weights @ values
    if output.isfinite().all():
        return output
    bad = ~values.isfinite()  # (..., k, d_v)
    output = weights @ values.masked_fill(bad, 0)  # NaN here only from a NaN weight

    def reached(
        weight_sign: torch.Tensor, value_kind: torch.Tensor
    ) -> torch.Tensor:  # (..., q, d_v): does any such product occur?
        return (weight_sign.to(values.dtype) @ value_kind.to(values.dtype)) > 0

    positive, negative = weights > 0, weights < 0
    plus_inf, minus_inf = values == float("inf"), values == float("-inf")
    to_plus = reached(positive, plus_inf) | reached(negative, minus_inf)
    to_minus = reached(positive, minus_inf) | reached(negative, plus_inf)
    nan = output.isnan() | reached(weights != 0, values.isnan()) | (to_plus & to_minus)
    output = output.masked_fill(to_plus, float("inf")).masked_fill(to_minus, float("-inf"))
    return output.masked_fill(nan, float("nan"))


def scaled_dot_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Q K^T / sqrt(d): (..., q, d) and (..., k, d) -> (..., q, k). 16-bit inputs are
    multiplied in float32, as torch's scaled_dot_product_attention does: their products
    overflow float16 (largest 65504) long before the scaled scores would."""
    _check_dot_scores(queries, keys)
    return _scaled_dot_scores(queries, keys)


def _scaled_dot_scores(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    if queries.element_size() < 4:
        queries, keys = queries.float(), keys.float()
    return queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])


class DotProductAttention(nn.Module):
    """Scaled dot-product attention: softmax(Q K^T / sqrt(d)) V, with masks.

    queries (B, ..., q, d), keys (B, ..., k, d), values (B, ..., k, d_v) -> (B, ..., q, d_v).
    """

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(validation.probability(dropout))
        self.attention_weights = None

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        _check_attention_inputs(queries, keys, values, same_size=True)
        valid_lens, mask = _checked_masks(
            _scores_shape(queries, keys), queries.device, valid_lens, mask
        )
        return self.attend(queries, keys, values, valid_lens, mask)

    def attend(self, queries, keys, values, valid_lens=None, mask=None) -> torch.Tensor:
        """forward's computation, for arguments already checked (MultiHeadAttention's heads)."""
        scores = _scaled_dot_scores(queries, keys)  # (B, ..., q, k)
        weights = _masked_softmax(scores, valid_lens, mask).to(values.dtype)
        self.attention_weights = weights.detach()  # kept to look at (a graph blocks deepcopy)
        return _weighted_sum(self.dropout(weights), values)  # (B, ..., q, d_v)


class HeadAttention(DotProductAttention):
    """DotProductAttention inside a MultiHeadAttention, over heads whose forward checked them:
    its forward is the computation alone. Still a module of its own, so that a hook on a
    model's heads (register_forward_hook on block.attention.attention) runs."""

    def forward(self, queries, keys, values, valid_lens=None, mask=None) -> torch.Tensor:
        return self.attend(queries, keys, values, valid_lens, mask)


class AdditiveAttention(nn.Module):
    """Additive attention: score(q, k) = w_v^T tanh(W_q q + W_k k), for q and k of any sizes.

    queries (B, q, query_size), keys (B, k, key_size), values (B, k, d_v) -> (B, q, d_v).
    """

    def __init__(self, key_size: int, query_size: int, num_hiddens: int, dropout: float = 0.0):
        super().__init__()
        dropout = _checked_additive_sizes(key_size, query_size, num_hiddens, dropout)
        self.W_k = nn.Linear(key_size, num_hiddens, bias=False)
        self.W_q = nn.Linear(query_size, num_hiddens, bias=False)
        self.w_v = nn.Linear(num_hiddens, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.attention_weights = None

    def scores(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """w_v^T tanh(W_q q + W_k k) for every pair: (B, q, query_size), (B, k, key_size) ->
        (B, q, k)."""
        self._check_inputs(queries, keys, keys)
        return self._scores(queries, keys)

    def _scores(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        projected_queries = self.W_q(queries).unsqueeze(-2)  # (B, q, 1, h)
        projected_keys = self.W_k(keys).unsqueeze(-3)  # (B, 1, k, h)
        features = torch.tanh(projected_queries + projected_keys)  # (B, q, k, h)
        return self.w_v(features).squeeze(-1)  # (B, q, k)

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self._check_inputs(queries, keys, values)
        valid_lens, mask = _checked_masks(
            _scores_shape(queries, keys), queries.device, valid_lens, mask
        )
        scores = self._scores(queries, keys)  # (B, q, k)
        weights = _masked_softmax(scores, valid_lens, mask)
        self.attention_weights = weights.detach()  # kept to look at (a graph blocks deepcopy)
        return _weighted_sum(self.dropout(weights), values)  # (B, q, d_v)

    def _check_inputs(self, queries, keys, values) -> None:
        _check_attention_inputs(queries, keys, values, same_size=False)
        for name, tensor, layer in (("queries", queries, self.W_q), ("keys", keys, self.W_k)):
            if tensor.shape[-1] != layer.in_features:
                raise ValueError(
                    f"{name} of size {tensor.shape[-1]} given to AdditiveAttention built for "
                    f"{name} of size {layer.in_features}"
                )
        if queries.dtype != self.W_q.weight.dtype:
            raise ValueError(
                f"inputs are {queries.dtype} but the layer's weights are {self.W_q.weight.dtype}: "
                f"convert one with .to()"
            )


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, n, d_model) -> (B, heads, n, d_model / heads): a reshape, then a transpose."""
    return _split_heads(x, _checked_split(x, num_heads))


def _split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    batch, n, d_model = x.shape
    return x.reshape(batch, n, num_heads, d_model // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, heads, n, d_head) -> (B, n, heads * d_head): the inverse of split_heads."""
    _check_merge(x)
    return _merge_heads(x)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, num_heads, n, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, n, num_heads * d_head)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: project, split into heads, attend in each, merge, project.

    queries (B, q, d_model), keys and values (B, k, d_model) -> (B, q, d_model).
    valid_lens: (B,) or (B, q). mask (True = may attend): (q, k), (B, q, k) or (B, heads, q, k);
    a 2-D mask is always (q, k), never torch's (B, k) key padding (use padding_mask for that).
    attention_weights after a forward pass: (B, heads, q, k).

    num_kv_heads: the number of key/value heads (None: one per query head). Fewer key/value
    heads (grouped-query attention; 1 is multi-query attention) are shared by groups of
    num_heads / num_kv_heads consecutive query heads: query head h reads key/value head
    h // (num_heads / num_kv_heads), as scaled_dot_product_attention(..., enable_gqa=True) does.
    W_k and W_v then project to num_kv_heads * d_head, and a KeyValueCache holds only those.

    rope: turn each head's queries and keys by their positions (RoPE, chapter 11), for
    self-attention, where query i and key i sit at the same position; positions count on from
    those a cache holds, so a cache keeps its keys already turned.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        num_kv_heads: int | None = None,
        rope: bool = False,
    ):
        super().__init__()
        d_model, num_heads, num_kv_heads, bias, rope = _checked_sizes(
            d_model, num_heads, num_kv_heads, bias, rope, dropout
        )
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.rope = rope
        kv_size = num_kv_heads * (d_model // num_heads)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, kv_size, bias=bias)
        self.W_v = nn.Linear(d_model, kv_size, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.attention = HeadAttention(dropout)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        return self.attention.attention_weights

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        valid_lens: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        cache: "KeyValueCache | None" = None,
    ) -> torch.Tensor:
        """cache: a KeyValueCache. The new keys and values are appended to it, and the queries
        attend to every position it holds (decoding one token at a time)."""
        valid_lens, mask = self._check_inputs(queries, keys, values, valid_lens, mask, cache)
        q = _split_heads(self.W_q(queries), self.num_heads)  # (B, heads, q, d_head)
        k = _split_heads(self.W_k(keys), self.num_kv_heads)  # (B, kv_heads, k, d_head)
        v = _split_heads(self.W_v(values), self.num_kv_heads)  # (B, kv_heads, k, d_head)
        if self.rope:  # the new positions come after the cached ones
            start = 0 if cache is None else len(cache)
            where = torch.arange(start, start + q.shape[2], device=q.device)  # (q,)
            q, k = rotated(q, where), rotated(k, where)
        if cache is not None:
            k, v = cache.extend(k, v)  # (B, kv_heads, cached + new, d_head)
        group = self.num_heads // self.num_kv_heads
        if group > 1:  # query head h reads key/value head h // group
            k = k.repeat_interleave(group, dim=1)  # (B, heads, k, d_head)
            v = v.repeat_interleave(group, dim=1)
        heads = self.attention(q, k, v, valid_lens, mask)  # (B, heads, q, d_head)
        return self.W_o(_merge_heads(heads))  # (B, q, d_model)

    def _checked_heads_mask(self, mask, batch, num_queries, num_keys):
        """(q, k) -> (1, 1, q, k); (B, q, k) -> (B, 1, q, k); (B, heads, q, k) as it is.

        A size-1 query axis broadcasts: (1, k) and (B, 1, k) mask keys for every query.
        """
        if not isinstance(mask, torch.Tensor) or mask.dim() not in (2, 3, 4):
            got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"mask must be (q, k), (B, q, k) or (B, heads, q, k), got {got}")
        heads_mask = {2: mask[None, None], 3: mask[:, None], 4: mask}[mask.dim()]
        full = (batch, self.num_heads, num_queries, num_keys)
        try:
            fits = torch.broadcast_shapes(heads_mask.shape, full) == full
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(
                f"mask of shape {tuple(mask.shape)} does not fit queries {num_queries} x keys "
                f"{num_keys} in a batch of {batch} with {self.num_heads} heads: expected (q, k), "
                f"(B, q, k) or (B, heads, q, k) = {full}"
            )
        return heads_mask

    def _check_inputs(self, queries, keys, values, valid_lens, mask, cache) -> tuple:
        """Check every argument before anything changes (a bad call leaves the cache as it
        was); return valid_lens and the mask shaped for the heads, as the heads' attention
        takes them."""
        self._check_tensors(queries, keys, values)
        if cache is not None and not isinstance(cache, KeyValueCache):
            raise ValueError(f"cache must be a KeyValueCache, got {type(cache).__name__}")
        if cache is not None:
            self._check_cache_fits(cache, queries.shape[0])
        if self.rope and queries.shape[1] != keys.shape[1]:
            raise ValueError(
                f"rope is for self-attention, queries and keys at the same positions, got "
                f"{queries.shape[1]} queries and {keys.shape[1]} keys"
            )
        new, num_keys = queries.shape[1], keys.shape[1] + (0 if cache is None else len(cache))
        if cache is not None and new > 1 and mask is None:
            raise ValueError(
                f"{new} new positions with a cache need a causal mask of shape "
                f"(new, cached + new) = ({new}, {num_keys}): without one, the earlier "
                f"new positions would see the later ones"
            )
        batch = queries.shape[0]
        mask = None if mask is None else self._checked_heads_mask(mask, batch, new, num_keys)
        scores = (batch, self.num_heads, new, num_keys)  # (B, heads, q, k)
        return _checked_masks(torch.Size(scores), queries.device, valid_lens, mask)

    def _check_cache_fits(self, cache: "KeyValueCache", batch: int) -> None:
        """A cache this layer filled for this batch, or an empty one."""
        held = cache.held_shape()  # (B, kv_heads, positions, d_head), or None
        d_head = self.d_model // self.num_heads
        if held is not None and (held[0], held[1], held[3]) != (batch, self.num_kv_heads, d_head):
            raise ValueError(
                f"the cache holds {held[0]} rows of {held[1]} key/value heads of size {held[3]}; "
                f"this layer makes {self.num_kv_heads} of size {d_head} (d_model {self.d_model}, "
                f"{self.num_heads} heads) and this call has {batch} rows: a cache serves one "
                f"layer and one batch (a new batch needs a new KeyValueCache())"
            )

    def _check_tensors(self, queries, keys, values) -> None:
        for name, value in (("queries", queries), ("keys", keys), ("values", values)):
            validation.tensor(value, name, f"(B, n, d_model={self.d_model})")
            if value.dim() != 3 or value.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} must be (B, n, d_model={self.d_model}), got {tuple(value.shape)}"
                )
        validation.same_float_dtype({"queries": queries, "keys": keys, "values": values})
        if keys.shape[:2] != values.shape[:2] or queries.shape[0] != keys.shape[0]:
            raise ValueError(
                f"queries {tuple(queries.shape)}, keys {tuple(keys.shape)} and values "
                f"{tuple(values.shape)} must share the batch, and keys and values the positions"
            )
        weight = self.W_q.weight
        if queries.dtype != weight.dtype or queries.device != weight.device:
            raise ValueError(
                f"inputs are {queries.dtype} on {queries.device} but the layer's weights are "
                f"{weight.dtype} on {weight.device}: move one to the other with .to()"
            )


class KeyValueCache:
    """The projected keys and values of every position decoded so far, for one attention
    layer: each decoding step appends one position instead of projecting all of them again."""

    def __init__(self):
        self.keys = self.values = None  # (B, heads, positions, d_head)

    def __len__(self) -> int:
        shape = self.held_shape()
        return 0 if shape is None else shape[2]

    def held_shape(self, name: str = "cache") -> tuple[int, ...] | None:
        """The shape (B, heads, positions, d_head) of the keys and values held, None when
        empty, after checking that both are held, as tensors with numbers, of one shape."""
        if self.keys is None and self.values is None:
            return None
        for part in ("keys", "values"):
            value = getattr(self, part)
            if (
                not isinstance(value, torch.Tensor)
                or value.is_meta
                or value.is_nested
                or value.layout != torch.strided
                or value.dim() != 4
            ):
                kind = "nested" if isinstance(value, torch.Tensor) and value.is_nested else None
                found = (
                    f"a {kind} tensor"
                    if kind
                    else f"a {'meta' if value.is_meta else value.layout} tensor "
                    f"{tuple(value.shape)}"
                    if isinstance(value, torch.Tensor)
                    else type(value).__name__
                )
                raise ValueError(
                    f"{name} must hold {part} (B, heads, positions, d_head) with numbers, or "
                    f"nothing (a new KeyValueCache()), got {found}"
                )
        if self.keys.shape != self.values.shape:
            raise ValueError(
                f"{name} holds keys {tuple(self.keys.shape)} and values "
                f"{tuple(self.values.shape)}: one shape, one value per key"
            )
        if (self.keys.dtype, self.keys.device) != (self.values.dtype, self.values.device):
            raise ValueError(
                f"{name} holds keys {self.keys.dtype} on {self.keys.device} and values "
                f"{self.values.dtype} on {self.values.device}: one dtype and one device for both"
            )
        return tuple(self.keys.shape)

    @property
    def nbytes(self) -> int:
        """The bytes of the keys and values held: 2 x B x heads x positions x d_head x size."""
        return 0 if self.held_shape() is None else self.keys.nbytes + self.values.nbytes

    def extend(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append (B, heads, new, d_head) keys and values; return all of them so far."""
        self._check_extend(keys, values)
        if self.keys is None:
            self.keys, self.values = keys, values
        else:
            self.keys = torch.cat([self.keys, keys], dim=2)  # (B, heads, cached + new, d_head)
            self.values = torch.cat([self.values, values], dim=2)
        return self.keys, self.values

    def _check_extend(self, keys, values) -> None:
        """keys and values: ordinary floating-point tensors of one shape, dtype and device,
        that continue what is held (torch.cat would promote another dtype without a word)."""
        for name, value in (("keys", keys), ("values", values)):
            if validation.dense_tensor(value, name, "(B, heads, new, d_head)").dim() != 4:
                raise ValueError(
                    f"{name} must be (B, heads, new, d_head), got {tuple(value.shape)}"
                )
            if not value.is_floating_point():
                raise ValueError(
                    f"{name} must be an ordinary floating-point tensor (B, heads, new, d_head), "
                    f"got {value.dtype}"
                )
        if keys.shape != values.shape:
            raise ValueError(
                f"keys {tuple(keys.shape)} and values {tuple(values.shape)} must have one shape"
            )
        if (keys.dtype, keys.device) != (values.dtype, values.device):
            raise ValueError(
                f"keys ({keys.dtype} on {keys.device}) and values ({values.dtype} on "
                f"{values.device}) must have one dtype and one device"
            )
        if self.held_shape() is None:
            return
        if keys.shape[:2] != self.keys.shape[:2] or keys.shape[3] != self.keys.shape[3]:
            raise ValueError(
                f"keys of shape {tuple(keys.shape)} do not extend a cache of shape "
                f"{tuple(self.keys.shape)}: batch, heads and d_head must match"
            )
        if (keys.dtype, keys.device) != (self.keys.dtype, self.keys.device):
            raise ValueError(
                f"keys {keys.dtype} on {keys.device} do not extend a cache of "
                f"{self.keys.dtype} on {self.keys.device}: one dtype and one device throughout"
            )


def copy_weights_from_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Give ``ours`` the weights of a torch.nn.MultiheadAttention of the same size."""
    _check_copyable(ours, theirs)
    d = ours.d_model
    with torch.no_grad():
        for index, layer in enumerate((ours.W_q, ours.W_k, ours.W_v)):
            layer.weight.copy_(theirs.in_proj_weight[index * d : (index + 1) * d])
            if layer.bias is not None:
                layer.bias.copy_(theirs.in_proj_bias[index * d : (index + 1) * d])
        ours.W_o.weight.copy_(theirs.out_proj.weight)
        if ours.W_o.bias is not None:
            ours.W_o.bias.copy_(theirs.out_proj.bias)


def _scores_shape(queries: torch.Tensor, keys: torch.Tensor) -> torch.Size:
    """The shape (..., q, k) of the scores of checked queries (..., q, d) and keys (..., k, d)."""
    return queries.shape[:-1] + keys.shape[-2:-1]


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _checked_masks(shape: torch.Size, device: torch.device, valid_lens, mask) -> tuple:
    """(valid_lens, mask) as the computation takes them, for scores of this shape (B, ..., q, k)
    on this device: valid_lens a tensor of whole numbers >= 0, (B,) or (B, q); mask boolean,
    broadcastable to the scores, on their device. None stays None."""
    if valid_lens is not None:
        valid_lens = _checked_valid_lens(valid_lens, shape)
    if mask is not None:
        mask = _checked_mask(mask, shape, device)
    return valid_lens, mask


def _checked_valid_lens(valid_lens: object, shape: torch.Size) -> torch.Tensor:
    """valid_lens as a tensor of whole numbers >= 0, (B,) or (B, q) for scores (B, ..., q, k)."""
    if not isinstance(valid_lens, torch.Tensor):
        try:
            valid_lens = torch.as_tensor(valid_lens)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise ValueError(
                f"valid_lens must be whole numbers from 0 to 2^63 - 1, got "
                f"{validation.shown(valid_lens)}"
            ) from None
    validation.dense_tensor(valid_lens, "valid_lens", "(B,) or (B, q)")
    if valid_lens.is_floating_point():
        finite = valid_lens.isfinite().all()
        if not (finite and torch.equal(valid_lens, valid_lens.round())):
            raise ValueError(
                f"valid_lens must hold finite whole numbers, got {valid_lens.tolist()}"
            )
        valid_lens = valid_lens.clamp(max=shape[-1]).long()  # past the last key: every key
    elif valid_lens.dtype == torch.bool:
        raise ValueError(
            "valid_lens must be integers, got a boolean tensor: a boolean tensor is a mask, "
            "pass it by name as mask=..."
        )
    elif valid_lens.is_complex():
        raise ValueError(f"valid_lens must be integers, got dtype {valid_lens.dtype}")
    elif valid_lens.dtype in (torch.uint16, torch.uint32, torch.uint64):  # few kernels read them
        keys = shape[-1]
        clamped = [min(length, keys) for length in valid_lens.flatten().tolist()]
        valid_lens = torch.tensor(clamped, dtype=torch.long).reshape(valid_lens.shape)
    if (valid_lens < 0).any():
        raise ValueError(f"valid_lens must be >= 0, got {valid_lens.tolist()}")
    batch, num_queries = shape[0], shape[-2] if len(shape) >= 2 else None
    per_example = valid_lens.dim() == 1 and valid_lens.shape[0] == batch and len(shape) >= 2
    per_query = (
        valid_lens.dim() == 2
        and len(shape) >= 3
        and tuple(valid_lens.shape) == (batch, num_queries)
    )
    if not (per_example or per_query):
        raise ValueError(
            f"valid_lens of shape {tuple(valid_lens.shape)} does not fit scores of shape "
            f"{tuple(shape)}: expected (B,) = ({batch},) or "
            f"(B, q) = ({batch}, {num_queries})"
        )
    return valid_lens


def _checked_mask(mask: object, shape: torch.Size, device: torch.device) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"mask must be a boolean tensor (True where a query may attend to a key), got {got}"
        )
    validation.dense_tensor(mask, "mask", "(..., q, k), boolean")
    try:
        broadcast = torch.broadcast_shapes(mask.shape, shape)
    except RuntimeError:
        broadcast = None
    if broadcast != shape:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to scores of shape {tuple(shape)}"
        )
    return mask.to(device)


def _check_scores(scores) -> None:
    if not isinstance(scores, torch.Tensor) or not scores.is_floating_point():
        got = scores.dtype if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a floating-point tensor, got {got}")
    validation.dense_tensor(scores, "scores", "(B, ..., q, k)")
    if scores.dim() < 1:
        raise ValueError("scores must have at least one axis (the keys)")


def _check_weighted_sum(weights, values) -> None:
    validation.dense_tensor(weights, "weights", "(..., q, k)")
    validation.dense_tensor(values, "values", "(..., k, d_v)")
    validation.same_float_dtype({"weights": weights, "values": values})
    if weights.dim() < 2 or values.dim() < 2 or weights.shape[-1] != values.shape[-2]:
        raise ValueError(
            f"weights {tuple(weights.shape)} and values {tuple(values.shape)} must be "
            f"(..., q, k) and (..., k, d_v) with the same number of keys"
        )
    _check_leading_axes({"weights": weights, "values": values})


def _check_leading_axes(named: dict) -> None:
    """The axes before the last two of each tensor broadcast to one shape (a batch, heads)."""
    try:
        torch.broadcast_shapes(*(value.shape[:-2] for value in named.values()))
    except RuntimeError:
        listed = " and ".join(f"{name} {tuple(value.shape)}" for name, value in named.items())
        raise ValueError(
            f"{listed} must share their leading axes (those before the last two), or "
            f"broadcast to one shape"
        ) from None


def _check_attention_inputs(queries, keys, values, same_size: bool) -> None:
    """Shapes (..., q, d), (..., k, d_k), (..., k, d_v) with the same leading axes, all of one
    floating-point dtype on one device."""
    for name, value in (("queries", queries), ("keys", keys), ("values", values)):
        validation.dense_tensor(value, name, "(B, ..., n, size)")
        if value.dim() < 3:
            raise ValueError(
                f"{name} must be a tensor of shape (B, ..., n, size), got {tuple(value.shape)}"
            )
    validation.same_float_dtype({"queries": queries, "keys": keys, "values": values})
    q, k, v = (tuple(t.shape) for t in (queries, keys, values))
    if 0 in (q[-1], k[-1], v[-1]):
        raise ValueError(f"queries {q}, keys {k} and values {v} need a size of at least 1")
    if not (q[:-2] == k[:-2] == v[:-2]) or k[-2] != v[-2]:
        raise ValueError(
            f"queries {q}, keys {k} and values {v} must share their leading axes, and keys "
            f"and values their number of positions"
        )
    if same_size and q[-1] != k[-1]:
        raise ValueError(f"dot-product scores need queries and keys of one size: got {q} and {k}")


def _check_dot_scores(queries, keys) -> None:
    """queries (..., q, d) and keys (..., k, d): dense floating-point tensors of one dtype and
    one size d, whose leading axes broadcast."""
    for name, value in (("queries", queries), ("keys", keys)):
        validation.dense_tensor(value, name, "(..., n, d)")
        if value.dim() < 2:
            raise ValueError(f"{name} must be (..., n, d), got shape {tuple(value.shape)}")
    validation.same_float_dtype({"queries": queries, "keys": keys})
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError(
            f"dot-product scores need queries and keys of one size: got {tuple(queries.shape)} "
            f"and {tuple(keys.shape)}"
        )
    _check_leading_axes({"queries": queries, "keys": keys})


def _checked_split(x: object, num_heads: object) -> int:
    """num_heads as an int, for x (B, n, d_model) whose d_model it divides."""
    if validation.tensor(x, "x", "(B, n, d_model)").dim() != 3:
        raise ValueError(f"x must be (B, n, d_model), got {tuple(x.shape)}")
    num_heads = validation.whole_number(num_heads, "num_heads")
    validation.head_size(x.shape[-1], num_heads)
    return num_heads


def _check_merge(x) -> None:
    if validation.tensor(x, "x", "(B, heads, n, d_head)").dim() != 4:
        raise ValueError(f"x must be (B, heads, n, d_head), got {tuple(x.shape)}")


def _checked_additive_sizes(key_size, query_size, num_hiddens, dropout) -> float:
    """AdditiveAttention's dropout, after its sizes are checked: whole numbers whose layers fit
    (before any layer is built, which would draw from torch's random numbers)."""
    for name, size in (
        ("key_size", key_size),
        ("query_size", query_size),
        ("num_hiddens", num_hiddens),
    ):
        validation.whole_number(size, name)
    for name, size in (("key_size", key_size), ("query_size", query_size)):
        validation.layer_weights(size, num_hiddens, f"{name} and num_hiddens")
    return validation.probability(dropout)


def _checked_sizes(d_model, num_heads, num_kv_heads, bias, rope, dropout) -> tuple:
    """MultiHeadAttention's sizes and flags as ints and bools, if they make heads of one size
    and layers that fit (checked, dropout too, before any layer draws its first weights)."""
    d_model = validation.whole_number(d_model, "d_model")
    validation.layer_weights(d_model, d_model, "d_model")
    num_heads = validation.whole_number(num_heads, "num_heads")
    bias = validation.flag(bias, "bias")
    rope = validation.flag(rope, "rope")
    validation.head_size(d_model, num_heads)
    if rope and (d_model // num_heads) % 2:
        raise ValueError(
            f"rope turns pairs of dimensions: each head's size, d_model / num_heads = "
            f"{d_model // num_heads}, must be even"
        )
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    num_kv_heads = validation.whole_number(num_kv_heads, "num_kv_heads")
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads}): "
            f"each key/value head serves a group of query heads of one size"
        )
    validation.probability(dropout)
    return d_model, num_heads, num_kv_heads, bias, rope


def _check_copyable(ours, theirs) -> None:
    if not isinstance(ours, MultiHeadAttention) or not isinstance(theirs, nn.MultiheadAttention):
        raise ValueError(
            f"expected our MultiHeadAttention and a torch.nn.MultiheadAttention, got "
            f"{type(ours).__name__} and {type(theirs).__name__}"
        )
    d = ours.d_model
    if ours.num_kv_heads != ours.num_heads:
        raise ValueError(
            f"torch.nn.MultiheadAttention has one key/value head per query head; ours has "
            f"num_kv_heads={ours.num_kv_heads} for num_heads={ours.num_heads}: copy weights only "
            f"into a MultiHeadAttention built with num_kv_heads=None"
        )
    if theirs.embed_dim != d or theirs.num_heads != ours.num_heads:
        raise ValueError(
            f"sizes differ: ours d_model={d}, heads={ours.num_heads}; theirs "
            f"embed_dim={theirs.embed_dim}, heads={theirs.num_heads}"
        )
    if theirs.in_proj_weight is None:
        raise ValueError("theirs has keys and values of other sizes (kdim, vdim); ours has not")
    if tuple(theirs.in_proj_weight.shape) != (3 * d, d):
        raise ValueError(
            f"theirs has in_proj_weight of shape {tuple(theirs.in_proj_weight.shape)}, expected "
            f"(3 * d_model, d_model) = ({3 * d}, {d})"
        )
    if theirs.bias_k is not None or theirs.add_zero_attn:
        raise ValueError("theirs adds extra keys (add_bias_kv or add_zero_attn); ours has none")
    if ours.rope:
        raise ValueError(
            "ours turns queries and keys by their positions (rope=True), torch's module does not: "
            "copy weights only into a MultiHeadAttention built with rope=False"
        )
    ours_bias, theirs_bias = ours.W_q.bias is not None, theirs.in_proj_bias is not None
    if ours_bias != theirs_bias:
        raise ValueError(
            f"bias settings differ: ours bias={ours_bias}, theirs bias={theirs_bias}; build "
            f"MultiHeadAttention(..., bias={theirs_bias})"
        )
    layers = {"W_q": ours.W_q, "W_k": ours.W_k, "W_v": ours.W_v, "W_o": ours.W_o}
    layers["theirs' out_proj"] = theirs.out_proj
    for name, layer in layers.items():
        bias = getattr(layer, "bias", None)
        if (
            not isinstance(layer, nn.Linear)
            or tuple(layer.weight.shape) != (d, d)
            or (bias is not None) != ours_bias
            or (bias is not None and tuple(bias.shape) != (d,))
        ):
            raise ValueError(
                f"{name} is not the layer a MultiHeadAttention of d_model {d} has (an "
                f"nn.Linear({d}, {d}, bias={ours_bias})), got {validation.shown(layer)}: was it "
                f"replaced?"
            )
    for name, value in (
        ("in_proj_weight", theirs.in_proj_weight),
        ("in_proj_bias", theirs.in_proj_bias),
        ("out_proj.weight", theirs.out_proj.weight),
    ):
        if value is not None:
            validation.dense_tensor(value, f"theirs' {name}", "of numbers")
