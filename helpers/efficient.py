"""Attention at scale: where the memory goes, the online softmax, FlashAttention's tiles, the
size of the key/value cache and grouped-query attention (chapter 10).

Mask convention, as everywhere in this project: a boolean mask is True where a query may
attend to a key.
"""

import collections
import dataclasses
import math
import weakref
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from helpers import validation
from helpers.attention import MultiHeadAttention, _check_attention_inputs, _weighted_sum

# ---------------------------------------------------------------------------------------------
# Counting bytes


def score_matrix_bytes(
    tokens: int, num_heads: int, bytes_per_number: int = 4, batch: int = 1
) -> int:
    """The bytes of one layer's score matrices: batch x heads x tokens x tokens numbers."""
    sizes = {
        "tokens": tokens,
        "num_heads": num_heads,
        "bytes_per_number": bytes_per_number,
        "batch": batch,
    }
    checked = {name: validation.whole_number(value, name) for name, value in sizes.items()}
    return (checked["batch"] * checked["num_heads"] * checked["tokens"] ** 2) * checked[
        "bytes_per_number"
    ]


def kv_cache_bytes(
    num_layers: int,
    num_kv_heads: int,
    head_size: int,
    tokens: int,
    batch: int = 1,
    bytes_per_number: int = 2,
) -> int:
    """The bytes of a key/value cache: 2 (keys and values) x layers x key/value heads x head
    size x tokens x batch x bytes per number (2 for float16 or bfloat16)."""
    sizes = {
        "num_layers": num_layers,
        "num_kv_heads": num_kv_heads,
        "head_size": head_size,
        "tokens": tokens,
        "batch": batch,
        "bytes_per_number": bytes_per_number,
    }
    product = 2
    for name, value in sizes.items():
        product *= validation.whole_number(value, name)
    return product


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """The sizes of a published decoder that decide its key/value cache."""

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_size: int
    context_length: int
    source: str

    def cache_bytes(self, tokens: int | None = None, batch: int = 1, bytes_per_number: int = 2):
        """The key/value cache for `tokens` (default: the full context), in float16."""
        tokens = self.context_length if tokens is None else tokens
        return kv_cache_bytes(
            self.num_layers, self.num_kv_heads, self.head_size, tokens, batch, bytes_per_number
        )


# Sizes as published: the papers' architecture tables and the models' configuration files.
PUBLISHED_MODELS = (
    ModelShape(
        "Llama 2 7B",
        num_layers=32,
        num_heads=32,
        num_kv_heads=32,
        head_size=128,
        context_length=4096,
        source="Touvron et al. 2023, Llama 2 (arXiv:2307.09288), Table 1 (context 4k, no GQA "
        "below 34B); dimension 4096, 32 heads, 32 layers as LLaMA 7B (arXiv:2302.13971, "
        "Table 2); meta-llama/Llama-2-7b-hf config.json",
    ),
    ModelShape(
        "Llama 2 70B",
        num_layers=80,
        num_heads=64,
        num_kv_heads=8,
        head_size=128,
        context_length=4096,
        source="Touvron et al. 2023, Llama 2 (arXiv:2307.09288), Table 1 (GQA); dimension "
        "8192, 64 heads, 80 layers, 8 key/value heads: meta-llama/Llama-2-70b-hf config.json",
    ),
    ModelShape(
        "Mistral 7B",
        num_layers=32,
        num_heads=32,
        num_kv_heads=8,
        head_size=128,
        context_length=8192,
        source="Jiang et al. 2023, Mistral 7B (arXiv:2310.06825), Table 1",
    ),
)


def run_operation(func, args, kwargs) -> tuple[object, list[torch.Tensor], set[int]]:
    """Inside a TorchDispatchMode: run one aten operation; return its result, the tensors in
    it, and the storages (data pointers) of its tensor inputs, to tell new tensors from views."""
    out = func(*args, **(kwargs or {}))
    inputs = {
        t.untyped_storage().data_ptr()
        for t in tree_leaves((args, kwargs))
        if isinstance(t, torch.Tensor)
    }
    returned = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    return out, returned, inputs


class _LiveBytes(TorchDispatchMode):
    """Follows every tensor that an operation inside the mode returns: its storage's bytes
    count from the operation that allocates it until the last tensor using it is freed."""

    def __init__(self):
        super().__init__()
        self.storages: dict[int, list[int]] = {}  # data pointer -> [bytes, live tensors]
        self.current = self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out, returned, inputs = run_operation(func, args, kwargs)
        for tensor in returned:
            self._follow(tensor, inputs)
        return out

    def _follow(self, tensor: torch.Tensor, inputs: set) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key == 0:  # an empty tensor
            return
        if key not in self.storages:
            if key in inputs:  # a view of (or an in-place change to) a tensor from outside
                return
            self.storages[key] = [storage.nbytes(), 0]
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
        self.storages[key][1] += 1
        weakref.finalize(tensor, self._release, key)

    def _release(self, key: int) -> None:
        entry = self.storages[key]
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.storages[key]


def peak_bytes(function: Callable[[], object]) -> int:
    """The largest number of bytes held at once by the tensors that function() creates (its
    inputs not counted, its result counted), measured by following every tensor the
    operations return. Scratch memory inside one fused kernel is not seen: only tensors that
    an operation hands back."""
    if not callable(function):
        raise ValueError(f"function must be callable with no arguments, got {function!r}")
    tracker = _LiveBytes()
    with tracker:
        result = function()
    del result
    return tracker.peak


class _OperationNames(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(f"aten::{func.overloadpacket.__name__}")
        return func(*args, **(kwargs or {}))


def operations_run(function: Callable[[], object]) -> list[str]:
    """The names of the torch operations that function() runs, in order, as torch's kernels
    are named (aten::...): what a composite operation such as scaled_dot_product_attention
    dispatches to on this machine."""
    if not callable(function):
        raise ValueError(f"function must be callable with no arguments, got {function!r}")
    recorder = _OperationNames()
    with recorder:
        function()
    return recorder.names


# ---------------------------------------------------------------------------------------------
# The online softmax and FlashAttention's forward pass


def _shift(running_max: torch.Tensor) -> torch.Tensor:
    """The running maximum, or 0 where it is still -inf (no key allowed so far): subtracting
    -inf from -inf would give NaN, subtracting 0 gives exp(-inf) = 0. A maximum of NaN or +inf
    stays, so that its row comes out NaN, as masked_softmax's does."""
    no_key_yet = running_max == float("-inf")
    return torch.where(no_key_yet, torch.zeros_like(running_max), running_max)


def online_softmax(
    scores: torch.Tensor, mask: torch.Tensor | None = None, tile_size: int = 1
) -> torch.Tensor:
    """Softmax over the last axis, with the normaliser found in one pass over the keys, one
    tile of `tile_size` keys at a time (Milakov and Gimelshein, 2018): a running maximum m and
    a running sum l of exp(score - m), rescaled by exp(m_old - m_new) whenever m grows.

    Equal to masked_softmax(scores, mask=mask): a key not allowed by the mask, or of score
    -inf, gets weight 0, and a row with no allowed key is all zeros (never NaN); a row with an
    allowed score of NaN or +inf is all NaN. 16-bit scores are summed in float32 and the
    result converted back.
    """
    validation.tensor(scores, "scores", "(..., k)")
    if not scores.is_floating_point() or scores.dim() < 1:
        raise ValueError(
            f"scores must be a floating-point tensor (..., k), got {scores.dtype} "
            f"{tuple(scores.shape)}"
        )
    tile_size = validation.whole_number(tile_size, "tile_size")
    allowed = None if mask is None else _check_mask(mask, tuple(scores.shape), scores.device)
    dtype = scores.dtype
    if scores.element_size() < 4:  # a 16-bit running sum stops growing long before 1024 keys
        scores = scores.float()
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    running_max = scores.new_full(scores.shape[:-1], float("-inf"))
    normaliser = scores.new_zeros(scores.shape[:-1])
    for start in range(0, scores.shape[-1], tile_size):
        tile = scores[..., start : start + tile_size]  # (..., tile)
        # the maximum only keeps exp() in range; the result does not depend on it
        new_max = torch.maximum(running_max, tile.detach().amax(dim=-1))
        shift = _shift(new_max)
        normaliser = normaliser * torch.exp(running_max - shift) + torch.exp(
            tile - shift[..., None]
        ).sum(dim=-1)
        running_max = new_max
    no_key = normaliser == 0  # (a NaN normaliser stays, and makes its row NaN)
    safe_normaliser = torch.where(no_key, torch.ones_like(normaliser), normaliser)
    weights = torch.exp(scores - _shift(running_max)[..., None]) / safe_normaliser[..., None]
    return weights.to(dtype)


@dataclasses.dataclass
class TileStep:
    """What one query block holds after reading one more tile of keys."""

    keys: slice  # the key positions of this tile
    scores: torch.Tensor  # (..., block, tile): scaled scores, -inf where masked
    running_max: torch.Tensor  # (..., block): the largest score read so far (-inf: none yet)
    normaliser: torch.Tensor  # (..., block): sum of exp(score - running_max) so far
    accumulator: torch.Tensor  # (..., block, d_v): sum of exp(score - running_max) * value

    @property
    def output(self) -> torch.Tensor:
        """The partial output accumulator / normaliser: attention over the keys read so far
        (zeros for a row that has had no allowed key yet)."""
        no_key = (self.normaliser == 0)[..., None]
        safe = torch.where(no_key, 1.0, self.normaliser[..., None])
        return self.accumulator / safe


def key_tile_steps(
    query_block: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask_block: torch.Tensor | None = None,
    tile_size: int = 64,
) -> Iterator[TileStep]:
    """FlashAttention's inner loop for one block of queries (..., block, d): read the keys
    (..., k, d) and values (..., k, d_v) one tile at a time, keep only a running maximum, a
    running normaliser and an unnormalised output, and yield them after each tile. mask_block:
    boolean, broadcastable to (..., block, k), True = may attend. The last step's output is
    the block's attention output. Bad arguments are refused at the call, before any step."""
    named = {"query_block": query_block, "keys": keys, "values": values}
    for name, value in named.items():
        if validation.tensor(value, name, "(..., n, size)").dim() < 2:
            raise ValueError(f"{name} must be (..., n, size), got {tuple(value.shape)}")
    validation.same_float_dtype(named)
    if query_block.shape[-1] != keys.shape[-1] or keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            f"query_block {tuple(query_block.shape)}, keys {tuple(keys.shape)} and values "
            f"{tuple(values.shape)}: queries and keys need one size, keys and values one "
            f"number of positions"
        )
    if 0 in (query_block.shape[-1], values.shape[-1]):
        raise ValueError(
            f"query_block {tuple(query_block.shape)} and values {tuple(values.shape)} need a "
            f"size of at least 1"
        )
    try:
        leading = torch.broadcast_shapes(query_block.shape[:-2], keys.shape[:-2], values.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading axes of query_block {tuple(query_block.shape)}, keys "
            f"{tuple(keys.shape)} and values {tuple(values.shape)} do not broadcast"
        ) from None
    shape = (*leading, query_block.shape[-2], keys.shape[-2])
    allowed = None if mask_block is None else _check_mask(mask_block, shape, query_block.device)
    tile_size = validation.whole_number(tile_size, "tile_size")
    return _key_tile_steps(query_block, keys, values, allowed, tile_size)


def _key_tile_steps(query_block, keys, values, mask_block, tile_size) -> Iterator[TileStep]:
    scale = 1 / math.sqrt(query_block.shape[-1])
    leading = query_block.shape[:-1]  # (..., block)
    running_max = query_block.new_full(leading, float("-inf"))
    normaliser = query_block.new_zeros(leading)
    accumulator = query_block.new_zeros(*leading, values.shape[-1])
    for start in range(0, keys.shape[-2], tile_size):
        columns = slice(start, start + tile_size)
        scores = query_block @ keys[..., columns, :].mT * scale  # (..., block, tile)
        if mask_block is not None:
            scores = scores.masked_fill(~mask_block[..., columns], float("-inf"))
        new_max = torch.maximum(running_max, scores.detach().amax(dim=-1))
        shift = _shift(new_max)
        correction = torch.exp(running_max - shift)  # (..., block): rescales what came before
        weights = torch.exp(scores - shift[..., None])  # (..., block, tile), not normalised
        normaliser = normaliser * correction + weights.sum(dim=-1)
        # a key of weight 0 (masked, or far below the maximum) adds nothing, even a value of inf
        # or NaN, as in DotProductAttention: a plain product would give 0 * NaN = NaN
        earlier = accumulator.masked_fill((correction == 0)[..., None], 0.0)
        accumulator = earlier * correction[..., None] + _weighted_sum(
            weights, values[..., columns, :]
        )
        running_max = new_max
        yield TileStep(columns, scores, running_max, normaliser, accumulator)


def tiled_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    tile_size: int = 64,
) -> torch.Tensor:
    """FlashAttention's forward pass (Dao et al., 2022) in plain torch: softmax(Q K^T / sqrt(d))
    V computed one block of `tile_size` queries and one tile of `tile_size` keys at a time
    with the online softmax, so no (q, k) score matrix exists at once: the extra memory is
    O(q x tile), not O(q x k).

    queries (B, ..., q, d), keys (B, ..., k, d), values (B, ..., k, d_v) -> (B, ..., q, d_v).
    mask: boolean, broadcastable to (B, ..., q, k), True where a query may attend to a key.
    Equal to DotProductAttention() (no dropout): a row with no allowed key gives zeros.
    16-bit inputs are computed in float32 and the result converted back.
    """
    _check_attention_inputs(queries, keys, values, same_size=True)
    tile_size = validation.whole_number(tile_size, "tile_size")
    shape = (*queries.shape[:-1], keys.shape[-2])
    allowed = None if mask is None else _check_mask(mask, shape, queries.device)
    dtype = values.dtype
    if queries.element_size() < 4:
        queries, keys, values = queries.float(), keys.float(), values.float()
    output = values.new_zeros(*queries.shape[:-1], values.shape[-1])  # (B, ..., q, d_v)
    for start in range(0, queries.shape[-2], tile_size):
        rows = slice(start, start + tile_size)
        block_mask = None if allowed is None else allowed[..., rows, :]
        steps = _key_tile_steps(queries[..., rows, :], keys, values, block_mask, tile_size)
        last = collections.deque(steps, maxlen=1)  # earlier steps are freed as we go
        if last:  # (no keys at all leaves the zeros: nothing to attend to)
            output[..., rows, :] = last[0].output  # (B, ..., block, d_v)
    return output.to(dtype)


# ---------------------------------------------------------------------------------------------
# Grouped-query attention


def kv_head_of_query_heads(num_heads: int, num_kv_heads: int) -> list[int]:
    """Which key/value head each query head reads: h // (num_heads / num_kv_heads), as
    MultiHeadAttention(..., num_kv_heads) and scaled_dot_product_attention(enable_gqa=True)."""
    num_heads = validation.whole_number(num_heads, "num_heads")
    num_kv_heads = validation.whole_number(num_kv_heads, "num_kv_heads")
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be divisible by num_kv_heads ({num_kv_heads})"
        )
    group = num_heads // num_kv_heads
    return [head // group for head in range(num_heads)]


def grouped_from_multi_head(layer: MultiHeadAttention, num_kv_heads: int) -> MultiHeadAttention:
    """A grouped-query copy of a multi-head layer: each key/value head's projection is the mean
    of the projections of the heads in its group (Ainslie et al. 2023 convert checkpoints this
    way before training on); the query and output projections are copied as they are."""
    if not isinstance(layer, MultiHeadAttention) or layer.num_kv_heads != layer.num_heads:
        got = type(layer).__name__
        if isinstance(layer, MultiHeadAttention):
            got = f"one with num_kv_heads={layer.num_kv_heads}"
        raise ValueError(
            f"layer must be a MultiHeadAttention with one key/value head per query head, got {got}"
        )
    kv_head_of_query_heads(layer.num_heads, num_kv_heads)  # checks the sizes
    bias = layer.W_q.bias is not None
    grouped = MultiHeadAttention(
        layer.d_model, layer.num_heads, layer.attention.dropout.p, bias, num_kv_heads
    )
    grouped.to(device=layer.W_q.weight.device, dtype=layer.W_q.weight.dtype)
    d_head = layer.d_model // layer.num_heads
    with torch.no_grad():
        grouped.W_q.load_state_dict(layer.W_q.state_dict())
        grouped.W_o.load_state_dict(layer.W_o.state_dict())
        for name in ("W_k", "W_v"):
            source, target = getattr(layer, name), getattr(grouped, name)
            # (kv_heads, group, d_head, d_model) -> mean over the group
            weight = source.weight.reshape(num_kv_heads, -1, d_head, layer.d_model)
            target.weight.copy_(weight.mean(dim=1).reshape(-1, layer.d_model))
            if bias:
                target.bias.copy_(source.bias.reshape(num_kv_heads, -1, d_head).mean(1).flatten())
    return grouped.train(layer.training)


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_mask(mask, shape: tuple, device: torch.device) -> torch.Tensor:
    """The boolean mask expanded to the scores' shape, on their device (as masked_softmax)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"mask must be a boolean tensor (True where a query may attend to a key), got {got}"
        )
    try:
        fits = torch.broadcast_shapes(mask.shape, shape) == torch.Size(shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} cannot broadcast to the scores' shape {shape}"
        )
    return mask.to(device).expand(shape)
