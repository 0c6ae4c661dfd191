"""Chapter 10's exercises: efficient attention.

1. check_merge_partial_attention: merge two attention outputs, each over its own part of the
   keys, with the log-sum-exp of each part's scores (Flash-Decoding's and ring attention's
   combine step).
2. check_grouped_query_attention: grouped-query attention that reshapes the query heads into
   groups instead of copying the key/value heads.
3. check_causal_tiled_attention: causal FlashAttention that skips the key tiles above the
   diagonal (counted in floating-point operations).
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from helpers.attention import DotProductAttention, MultiHeadAttention, masked_softmax
from helpers.efficient import key_tile_steps, online_softmax, run_operation, tiled_attention
from helpers.exercises.framework import Refused, report, run_case

__all__ = [
    "check_causal_tiled_attention",
    "check_grouped_query_attention",
    "check_merge_partial_attention",
]

_FORBIDDEN_ATTENTION = {
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
    "helpers' DotProductAttention": DotProductAttention.forward,
    "helpers' MultiHeadAttention": MultiHeadAttention.forward,
    "helpers.efficient.tiled_attention": tiled_attention,
    "helpers.efficient.key_tile_steps": key_tile_steps,
}


def _merge(output_a, lse_a, output_b, lse_b):
    """The combined output: each part weighted by its share exp(lse_part - lse_total)."""
    largest = torch.maximum(lse_a, lse_b)
    shift = torch.where(largest.isfinite(), largest, torch.zeros_like(largest))
    weight_a, weight_b = torch.exp(lse_a - shift), torch.exp(lse_b - shift)  # (B, q)
    total = weight_a + weight_b
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return (weight_a[..., None] * output_a + weight_b[..., None] * output_b) / safe[..., None]


def _part(scores, mask, values):
    """Attention over one part of the keys, and the log-sum-exp of its allowed scores."""
    lse = torch.logsumexp(scores.masked_fill(~mask, float("-inf")), dim=-1)  # (B, q)
    return masked_softmax(scores, mask=mask) @ values, lse


def check_merge_partial_attention(learner_merge: Callable) -> bool:
    """learner_merge(output_a, lse_a, output_b, lse_b) -> (B, q, d_v): output_a (B, q, d_v) is
    attention over one part of the keys (zeros for a query with no allowed key there), lse_a
    (B, q) the log-sum-exp of that part's allowed scores (-inf for none); the same for part b.
    Return attention over all the keys: never NaN, even when a query has no key in a part, or
    in both (then zeros), and without overflow for scores in the thousands."""
    generator = torch.Generator().manual_seed(10)
    cases = [
        ("two parts of 4 and 6 keys", 0.0, "none"),
        ("scores near 1000 (exp(1000) overflows)", 1000.0, "none"),
        ("left padding: some queries have no key in part a", 0.0, "first part"),
        ("a query with no key in either part", 0.0, "one row"),
    ]
    failures, passed = [], 0
    for name, offset, empty in cases:
        batch, q, k, split, d_v = 2, 3, 10, 4, 5
        scores = torch.randn(batch, q, k, generator=generator) * 2 + offset
        values = torch.randn(batch, k, d_v, generator=generator)
        mask = torch.ones(batch, q, k, dtype=torch.bool)
        if empty == "first part":
            mask[0, :, :split] = False
        elif empty == "one row":
            mask[1, 2] = False
        output_a, lse_a = _part(scores[..., :split], mask[..., :split], values[:, :split])
        output_b, lse_b = _part(scores[..., split:], mask[..., split:], values[:, split:])
        args = (output_a, lse_a, output_b, lse_b)
        no_key = not mask.any(-1).all()
        mistakes = {
            "the two outputs are averaged: weight each by its share of the softmax's "
            "denominator, exp(lse_part) / (exp(lse_a) + exp(lse_b))": (output_a + output_b) / 2,
            "exp(lse) without subtracting the larger lse first: exp(1000) is inf in float32, "
            "and inf / inf is NaN": _unshifted(*args),
            "not divided by the total weight exp(lse_a) + exp(lse_b)": _undivided(*args),
        }
        if no_key:
            mistakes[
                "exp(lse - lse_total) with lse_total = -inf gives exp(-inf - (-inf)) = NaN: a "
                "query with no key in either part must come out as zeros"
            ] = _through_total(*args)
        ok = run_case(
            name,
            learner_merge,
            args,
            _merge,
            failures,
            1e-4,
            "weight each part by exp(lse_part - max(lse_a, lse_b)) and divide by the sum of "
            "the two weights"
            + ("; a query with no key in either part gets zeros" if no_key else ""),
            mistakes,
            names=("output_a", "lse_a", "output_b", "lse_b"),
        )
        if not ok and "gradient with respect to `lse_" in failures[-1]:
            failures[-1] += (
                "; here: torch.logaddexp(-inf, -inf), and exp(lse - lse_total) with lse_total "
                "= -inf, have a NaN gradient even where torch.where then replaces their value: "
                "shift by max(lse_a, lse_b), or by 0 where that is -inf, before any exp"
            )
        passed += ok
    return report(failures, passed)


def _unshifted(output_a, lse_a, output_b, lse_b):
    weight_a, weight_b = torch.exp(lse_a)[..., None], torch.exp(lse_b)[..., None]
    return (weight_a * output_a + weight_b * output_b) / (weight_a + weight_b)


def _undivided(output_a, lse_a, output_b, lse_b):
    largest = torch.maximum(lse_a, lse_b)
    shift = torch.where(largest.isfinite(), largest, torch.zeros_like(largest))[..., None]
    return (
        torch.exp(lse_a[..., None] - shift) * output_a
        + torch.exp(lse_b[..., None] - shift) * output_b
    )


def _through_total(output_a, lse_a, output_b, lse_b):
    total = torch.logaddexp(lse_a, lse_b)[..., None]
    return (
        torch.exp(lse_a[..., None] - total) * output_a
        + torch.exp(lse_b[..., None] - total) * output_b
    )


class _CopiesOf(TorchDispatchMode):
    """Records the torch operations (aten, however they were called) inside it that return a
    new tensor of one of the `sizes` (numbers of elements): copies of a tensor that big."""

    def __init__(self, sizes: set[int]):
        super().__init__()
        self.sizes, self.seen = sizes, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out, returned, inputs = run_operation(func, args, kwargs)
        for tensor in returned:
            if (
                tensor.numel() in self.sizes
                and tensor.untyped_storage().data_ptr() not in inputs  # not a view
            ):
                self.seen.append(func.overloadpacket.__name__)
        return out


def _gqa(queries, keys, values, mask, order="interleave"):
    group = queries.shape[1] // keys.shape[1]
    if order == "interleave":  # query head h reads key/value head h // group
        keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    else:  # the mistake: query head h reads key/value head h % kv_heads
        keys, values = keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])  # (B, heads, q, k)
    return masked_softmax(scores, mask=mask) @ values


_COPIES = (
    "copies the key/value heads: inside your function torch made a new tensor of group x their "
    "size (its internal operation aten.{}); repeat, repeat_interleave, expand followed by "
    "reshape or contiguous, and a matrix product that broadcasts one key/value head over its "
    "group all make such a copy: fold each group of query heads into the query axis instead, "
    "(B, kv_heads, group * q, d), so that one product per key/value head serves the whole group"
)


def check_grouped_query_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, mask) -> (B, heads, q, d_v): queries (B,
    heads, q, d), keys (B, kv_heads, k, d), values (B, kv_heads, k, d_v); query head h reads
    key/value head h // (heads / kv_heads); scaled dot-product scores; mask boolean (B, 1, q, k)
    (True = may attend) or None; a query with no allowed key gets zeros. Without copying the
    key/value heads (no tensor of group x their size: fold each group of query heads into the
    query axis) and without torch's or helpers' attention (helpers' masked_softmax is
    allowed)."""
    generator = torch.Generator().manual_seed(11)
    cases = [
        ("8 query heads, 2 key/value heads, no mask", 8, 2, False),
        ("6 query heads, 3 key/value heads, a causal and padding mask", 6, 3, True),
        ("4 query heads, 1 key/value head (multi-query), a mask", 4, 1, True),
        ("4 query heads, 4 key/value heads (multi-head), a mask", 4, 4, True),
    ]
    failures, passed = [], 0
    for name, heads, kv_heads, masked in cases:
        batch, q, k, d, d_v = 2, 5, 6, 4, 3
        queries = torch.randn(batch, heads, q, d, generator=generator)
        keys = torch.randn(batch, kv_heads, k, d, generator=generator)
        values = torch.randn(batch, kv_heads, k, d_v, generator=generator)
        mask = None
        if masked:
            causal = torch.ones(q, k, dtype=torch.bool).tril(diagonal=k - q)
            padding = torch.tensor([[False, False, True, True, True, True], [True] * 6])
            mask = (causal & padding[:, None, :])[:, None]  # (B, 1, q, k)
        mistakes = {}
        if 1 < kv_heads < heads:
            mistakes[
                "query head h reads key/value head h % kv_heads (the order of repeat, or of "
                "groups reshaped as (B, group, kv_heads, ...)): it must read h // group, "
                "consecutive query heads sharing one key/value head"
            ] = _gqa(queries, keys, values, mask, order="tile")
        mistakes["the scores are not divided by sqrt(d)"] = _gqa(
            queries * math.sqrt(d), keys, values, mask
        )

        group = heads // kv_heads
        copies = {group * keys.numel(), group * values.numel()} if group > 1 else set()

        def learner(*args, copies=copies):
            with _CopiesOf(copies) as calls:
                answer = learner_attention(*args)
            if calls.seen:
                raise Refused(_COPIES.format(calls.seen[0]))
            return answer

        passed += run_case(
            name,
            learner,
            (queries, keys, values, mask),
            _gqa,
            failures,
            1e-5,
            "query head h attends with key/value head h // (heads / kv_heads)",
            mistakes,
            forbidden=_FORBIDDEN_ATTENTION,
            names=("queries", "keys", "values", "mask"),
        )
    return report(failures, passed)


def _causal(queries, keys, values):
    n = queries.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return masked_softmax(queries @ keys.mT / math.sqrt(queries.shape[-1]), mask=causal) @ values


def _causal_tiles(queries, keys, values, tile_size, rescale=True, diagonal=True, divide=None):
    """Two typical mistakes of causal FlashAttention: rescale=False never multiplies the old
    sum and output by exp(m_old - m_new); diagonal=False skips the tile on the diagonal too
    (a block that reads no key then divides 0 by 0, or by `divide` where the sum is 0)."""
    batch, n, d = queries.shape
    output = []
    for start in range(0, n, tile_size):
        block = queries[:, start : start + tile_size]  # (B, rows, d)
        rows = torch.arange(start, start + block.shape[1])
        running_max = torch.full(block.shape[:2], float("-inf"))
        normaliser = torch.zeros(block.shape[:2])
        accumulator = torch.zeros(batch, block.shape[1], values.shape[-1])
        for key_start in range(0, start + block.shape[1] if diagonal else start, tile_size):
            columns = torch.arange(key_start, min(key_start + tile_size, n))
            scores = block @ keys[:, columns].mT / math.sqrt(d)
            scores = scores.masked_fill(columns[None, :] > rows[:, None], float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(-1))
            correction = torch.exp(running_max - new_max)
            if not rescale:
                correction = torch.ones_like(correction)
            weights = torch.exp(scores - new_max[..., None])
            normaliser = normaliser * correction + weights.sum(-1)
            accumulator = accumulator * correction[..., None] + weights @ values[:, columns]
            running_max = new_max
        if divide is not None:
            normaliser = torch.where(normaliser > 0, normaliser, divide)
        output.append(accumulator / normaliser[..., None])
    return torch.cat(output, dim=1)


def _skipping_flops(n: int, tile_size: int, d: int, d_v: int, batch: int) -> int:
    """The matrix-product operations of causal tiles that skip the tiles above the diagonal:
    for each query block, the key tiles up to and including the block's last query."""
    total = 0
    for start in range(0, n, tile_size):
        rows = min(tile_size, n - start)
        keys_read = min(start + rows, n)  # every key up to the block's last query
        total += 2 * rows * keys_read * (d + d_v)  # Q K^T and P V
    return batch * total


def check_causal_tiled_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, tile_size) -> (B, n, d_v): causal attention
    (query i attends to keys j <= i) computed FlashAttention's way, a block of tile_size
    queries and a tile of tile_size keys at a time with the online softmax, and skipping the
    key tiles that lie wholly above the diagonal: its matrix products may not exceed those of
    the tiles it needs. n need not be a multiple of tile_size. Without torch's or helpers'
    attention, helpers.efficient's tiled_attention, key_tile_steps and online_softmax,
    softmax and masked_softmax."""
    generator = torch.Generator().manual_seed(12)
    forbidden = {
        **_FORBIDDEN_ATTENTION,
        "helpers.efficient.online_softmax": online_softmax,
        "helpers' masked_softmax": masked_softmax,
        "torch.softmax": torch.softmax,
        "torch.nn.functional.softmax": F.softmax,
    }
    cases = [
        ("n = 16, tiles of 4", 16, 4),
        ("n = 10, tiles of 4", 10, 4),
        ("n = 12, tiles of 5", 12, 5),
    ]
    failures, passed = [], 0
    for name, n, tile_size in cases:
        batch, d, d_v = 2, 4, 3
        queries = torch.randn(batch, n, d, generator=generator)
        keys = torch.randn(batch, n, d, generator=generator)
        values = torch.randn(batch, n, d_v, generator=generator)
        args = (queries, keys, values)
        scores = queries @ keys.mT / math.sqrt(d)
        diagonal_open = torch.zeros(n, n, dtype=torch.bool)
        for start in range(0, n, tile_size):
            diagonal_open[start : start + tile_size, : start + tile_size] = True
        mistakes = {
            "the tile on the diagonal needs the causal mask inside it: its keys after the "
            "query are read": masked_softmax(scores, mask=diagonal_open) @ values,
            "not causal: every key is read": torch.softmax(scores, -1) @ values,
            "the scores are not divided by sqrt(d)": _causal(queries * math.sqrt(d), keys, values),
            "the running sum and output are not rescaled when the maximum grows: multiply both "
            "by exp(m_old - m_new) before adding a tile": _causal_tiles(
                *args, tile_size, rescale=False
            ),
            "the tile on the diagonal is skipped too (the first block then reads no key, 0 / "
            "0): read every key tile up to the one that holds the block's last query": (
                _causal_tiles(*args, tile_size, diagonal=False)
            ),
            "the tile on the diagonal is skipped too: read every key tile up to the one that "
            "holds the block's last query": _causal_tiles(
                *args, tile_size, diagonal=False, divide=1.0
            ),
        }
        ok = run_case(
            name,
            lambda q, k, v, t=tile_size: learner_attention(q, k, v, t),
            args,
            _causal,
            failures,
            1e-5,
            "query i attends to keys 0..i",
            mistakes,
            forbidden=forbidden,
            names=("queries", "keys", "values"),
        )
        if ok:
            ok = _skips_the_upper_tiles(learner_attention, args, tile_size, name, failures)
        passed += ok
    return report(failures, passed)


def _skips_the_upper_tiles(learner_attention, args, tile_size, name, failures) -> bool:
    queries, keys, values = args
    batch, n, d = queries.shape
    budget = _skipping_flops(n, tile_size, d, values.shape[-1], batch)
    everything = batch * 2 * n * n * (d + values.shape[-1])
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), counter:
            learner_attention(queries.clone(), keys.clone(), values.clone(), tile_size)
    except Exception as error:  # the learner's code may fail in any way
        failures.append(f"{name}: your function raised {type(error).__name__}: {error}")
        return False
    flops = counter.get_total_flops()
    if flops <= budget * 1.05:
        return True
    failures.append(
        f"{name}: the values are right, but the matrix products take {flops} operations where "
        f"the tiles on and below the diagonal take {budget} (all tiles: {everything}): it "
        f"computes key tiles above the diagonal; skip a tile whose first key comes after the "
        f"block's last query (a mask hides those scores, but they are still computed)"
    )
    return False
