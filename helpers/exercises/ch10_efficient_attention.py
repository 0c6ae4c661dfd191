"""Chapter 10's exercises: efficient attention.

1. check_merge_partial_attention: merge two attention outputs, each over its own part of the
   keys, with the log-sum-exp of each part's scores (Flash-Decoding's and ring attention's
   combine step).
2. check_grouped_query_attention: grouped-query attention that reshapes the query heads into
   groups instead of copying the key/value heads.
3. check_causal_tiled_attention: causal FlashAttention that skips the key tiles above the
   diagonal (every multiplication counted, however it is spelled), with the softmax written
   out.
"""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import DotProductAttention, MultiHeadAttention, masked_softmax
from helpers.efficient import key_tile_steps, online_softmax, run_operation, tiled_attention
from helpers.exercises.framework import (
    SCALED_BY_VALUE_WIDTH,
    OperationsWatcher,
    Refused,
    exercise_checker,
    name_a_partial_last_block,
    not_a_multiple,
    recording_calls,
    register_checker_hook,
    report,
    run_case,
    whole_blocks_only,
)

__all__ = [
    "check_causal_tiled_attention",
    "check_grouped_query_attention",
    "check_merge_partial_attention",
]

_FORBIDDEN_ATTENTION = {
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
    "helpers' DotProductAttention": DotProductAttention.forward,
    "helpers' DotProductAttention.attend": DotProductAttention.attend,
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


@exercise_checker
def check_merge_partial_attention(learner_merge: Callable) -> bool:
    """learner_merge(output_a, lse_a, output_b, lse_b) -> (B, q, d_v), here B = 2, q = 3,
    d_v = 5. output_a (B, q, d_v) is attention over one part of the keys (zeros for a query
    with no allowed key there), lse_a (B, q) the log-sum-exp of that part's allowed scores
    (-inf for a query with none); output_b and lse_b the same for the other part. Return
    attention over all the keys: never NaN, even when a query has no key in a part, or in both
    (then its row is zeros), and without overflow for scores in the thousands."""
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
            "the outputs are swapped between the parts: output_a is weighted by exp(lse_b) "
            "and output_b by exp(lse_a); each part's output takes its own lse's weight": _merge(
                output_b, lse_a, output_a, lse_b
            ),
            "picks the output of the part with the larger lse: both parts count, each weighted "
            "by its share exp(lse_part) / (exp(lse_a) + exp(lse_b))": torch.where(
                (lse_a >= lse_b)[..., None], output_a, output_b
            ),
        }
        if no_key:
            mistakes[
                "exp(lse - lse_total) with lse_total = -inf gives exp(-inf - (-inf)) = NaN: a "
                "query with no key in either part must come out as zeros"
            ] = _through_total(*args)
        ok = run_case(
            name,
            _empty_rows_unjudged(learner_merge, ~mask.any(-1)),
            args,
            _merge,
            failures,
            atol=1e-4,
            hint="weight each part by exp(lse_part - max(lse_a, lse_b)) and divide by the sum of "
            "the two weights"
            + ("; a query with no key in either part gets zeros" if no_key else ""),
            mistakes=mistakes,
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


def _empty_rows_unjudged(learner_merge: Callable, empty: torch.Tensor) -> Callable:
    """The learner's function, with the gradient that reaches output_a and output_b at the
    `empty` rows (B, q) (queries with no key in either part) set to zero: those rows are zeros
    whatever their weights (-1e9 in place of -inf weighs each part 1/2, as right as 0), so
    their gradient is not judged. The gradient to lse_a and lse_b is."""

    def learner(output_a, lse_a, output_b, lse_b):
        for output in (output_a, output_b):
            if isinstance(output, torch.Tensor) and output.requires_grad:
                register_checker_hook(output, lambda grad: grad.masked_fill(empty[..., None], 0.0))
        return learner_merge(output_a, lse_a, output_b, lse_b)

    return learner


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


class _CopiesOf(OperationsWatcher):
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


def _repeated_heads(queries, keys, values, order="interleave"):
    """Keys and values repeated for their query heads: query head h reads key/value head
    h // group ("interleave"), or, the mistake, h % kv_heads ("tile")."""
    group = queries.shape[1] // keys.shape[1]
    if order == "interleave":
        return keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
    return keys.repeat(1, group, 1, 1), values.repeat(1, group, 1, 1)


def _gqa(queries, keys, values, mask, order="interleave"):
    keys, values = _repeated_heads(queries, keys, values, order)
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])  # (B, heads, q, k)
    return masked_softmax(scores, mask=mask) @ values


def _gqa_filled(queries, keys, values, mask, fill):
    """The mask applied by filling the scores it forbids with `fill`, then a plain softmax."""
    keys, values = _repeated_heads(queries, keys, values)
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])
    return torch.softmax(scores.masked_fill(~mask, fill), dim=-1) @ values


_COPIES = (
    "copies the key/value heads: inside your function torch made a new tensor of group x their "
    "size (its internal operation aten.{}); repeat, repeat_interleave, expand followed by "
    "reshape or contiguous, and a matrix product that broadcasts one key/value head over its "
    "group all make such a copy: fold each group of query heads into the query axis instead, "
    "(B, kv_heads, group * q, d), so that one product per key/value head serves the whole group"
)


def _calls_refused(called: list[str]) -> Refused:
    return Refused(f"calls {called[0]}, which this exercise asks you to write yourself")


def _without_copies(learner_attention: Callable, copies: set[int]) -> Callable:
    """The learner's function, refused by name if it calls torch's or helpers' attention, or
    if it makes a tensor of group x the keys' or values' size."""

    def learner(*args):
        with recording_calls(_FORBIDDEN_ATTENTION) as called, _CopiesOf(copies) as copied:
            answer = learner_attention(*args)
        if called:
            raise _calls_refused(called)
        if copied.seen:
            raise Refused(_COPIES.format(copied.seen[0]))
        return answer

    return learner


def _mask_mistakes(queries, keys, values, mask) -> dict:
    """What the usual mask slips return, each with its diagnosis."""
    no_key = (~mask.any(-1)).nonzero()
    where = ""
    if len(no_key):
        example, _, query = no_key[0].tolist()
        where = f" (here query {query} of example {example}, which may read no key)"
    return {
        "the mask is ignored: a query must not read a key where the mask is False": _gqa(
            queries, keys, values, None
        ),
        "the mask is read the wrong way round: True means the query MAY attend to the key "
        "(chapter 06's convention)": _gqa(queries, keys, values, ~mask),
        "the masked scores are filled with -inf and then softmax: a query with no allowed key"
        + where
        + " gets exp(-inf) / 0 = NaN; it must get zeros (masked_softmax gives them)": (
            _gqa_filled(queries, keys, values, mask, float("-inf"))
        ),
        "filling the masked scores with -1e9 is right wherever a query has an allowed key, but "
        "a query with none"
        + where
        + " then weighs every key alike and returns the average of the values instead of zeros "
        "(masked_softmax gives zeros)": _gqa_filled(queries, keys, values, mask, -1e9),
    }


@exercise_checker
def check_grouped_query_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, mask) -> (B, heads, q, d_v): queries (B,
    heads, q, d), keys (B, kv_heads, k, d), values (B, kv_heads, k, d_v), here B = 2, q = 5,
    k = 6, d = 4 and d_v = 3 (values narrower than keys); query head h reads key/value head
    h // (heads / kv_heads); scores q.k / sqrt(d), d the width of the queries and keys (not
    d_v); mask boolean (B, 1, q, k) (True = may attend) or None. With the mask, query 0 of
    example 0 may read no key: its row must be zeros (helpers' masked_softmax gives them; a
    fill of -inf then softmax gives NaN, -1e9 an average). Without copying the key/value
    heads (no tensor of group x their size: fold each group of query heads into the query
    axis). A matrix product that broadcasts one key/value head over its group,
    (B, kv_heads, group, q, d) @ (B, kv_heads, 1, d, k), copies it too (torch expands it
    inside the product); einsum over a group axis does not. Without torch's or helpers'
    attention (a softmax in any spelling, masked_softmax included, is allowed)."""
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
        mistakes[SCALED_BY_VALUE_WIDTH] = _gqa(queries * math.sqrt(d / d_v), keys, values, mask)
        if masked:
            mistakes.update(_mask_mistakes(queries, keys, values, mask))

        group = heads // kv_heads
        copies = {group * keys.numel(), group * values.numel()} if group > 1 else set()
        passed += run_case(
            name,
            _without_copies(learner_attention, copies),
            (queries, keys, values, mask),
            _gqa,
            failures,
            atol=1e-5,
            hint=(
                "softmax(q.k / sqrt(d)) over the allowed keys, query head h reading key/value "
                "head h // (heads / kv_heads)"
            ),
            mistakes=mistakes,
            names=("queries", "keys", "values", "mask"),
        )
    return report(failures, passed)


def _causal(queries, keys, values):
    n = queries.shape[-2]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return masked_softmax(queries @ keys.mT / math.sqrt(queries.shape[-1]), mask=causal) @ values


def _causal_tiles(
    queries,
    keys,
    values,
    tile_size,
    rescaled=("accumulator", "normaliser"),
    diagonal=True,
    divide=None,
    strict=False,
):
    """Typical mistakes of causal FlashAttention: what `rescaled` leaves out is never
    multiplied by exp(m_old - m_new); diagonal=False skips the tile on the diagonal too (a
    block that reads no key then divides 0 by 0, or by `divide` where the sum is 0);
    strict=True lets a query read only the keys before it (query 0 then reads none: NaN)."""
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
            future = columns[None, :] >= rows[:, None] if strict else columns > rows[:, None]
            scores = scores.masked_fill(future, float("-inf"))
            new_max = torch.maximum(running_max, scores.amax(-1))
            correction = torch.exp(running_max - new_max)
            kept = torch.ones_like(correction)
            normaliser_correction = correction if "normaliser" in rescaled else kept
            accumulator_correction = correction if "accumulator" in rescaled else kept
            weights = torch.exp(scores - new_max[..., None])
            normaliser = normaliser * normaliser_correction + weights.sum(-1)
            accumulator = (
                accumulator * accumulator_correction[..., None] + weights @ values[:, columns]
            )
            running_max = new_max
        if divide is not None:
            normaliser = torch.where(normaliser > 0, normaliser, divide)
        output.append(accumulator / normaliser[..., None])
    return torch.cat(output, dim=1)


_SOFTMAX_OPERATIONS = {"_softmax", "_log_softmax", "_safe_softmax", "_masked_softmax", "logsumexp"}

_SOFTMAX = (
    "computes a softmax with torch (its internal operation aten.{}, which torch.softmax, "
    "Tensor.softmax, F.softmax, nn.Softmax, log_softmax, logsumexp and helpers' masked_softmax "
    "all run): this exercise asks for the softmax written out, the online way: exp, a running "
    "maximum and running sums"
)


class _SoftmaxCalls(OperationsWatcher):
    """Records torch's softmax operations run inside it, however they were spelled."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in _SOFTMAX_OPERATIONS:
            self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


_MATRIX_PRODUCTS = {"mm", "bmm", "addmm", "baddbmm", "mv", "addmv", "dot", "vdot"}
_ELEMENTWISE_PRODUCTS = {"mul", "mul_", "div", "div_", "addcmul", "addcmul_", "addcdiv", "addcdiv_"}


class _Multiplications(OperationsWatcher):
    """Counts the multiplications of the torch operations run inside it, however they were
    spelled: m * k * n for a matrix product (what @, matmul, einsum, linear and dot run), one
    per element of the result for an element-wise product or quotient. A product written as a
    broadcast multiply-and-sum counts as much as the matrix product it replaces."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _MATRIX_PRODUCTS:  # the factors are the last two arguments
            first, second = args[-2], args[-1]  # (..., m, k) and (..., k, n), or vectors
            self.count += first.numel() * (second.shape[-1] if second.dim() > 1 else 1)
        elif name in _ELEMENTWISE_PRODUCTS and isinstance(out, torch.Tensor):
            self.count += out.numel()
        return out


# Element-wise work on the tiles (dividing by sqrt(d), rescaling the running output) adds
# about 8% to the matrix products in the checker's cases (d = 32, d_v = 4); a kernel that
# computes every tile multiplies at least 1.5 times as often as the tiles need, one that reads
# one tile too many per block 1.35 times.
_SLACK = 1.25


def _needed_multiplications(n: int, tile_size: int, d: int, d_v: int, batch: int) -> int:
    """The matrix products of causal tiles that skip the tiles above the diagonal: for each
    query block, the key tiles up to and including the block's last query."""
    total = 0
    for start in range(0, n, tile_size):
        rows = min(tile_size, n - start)
        keys_read = start + rows  # every key up to the block's last query
        total += rows * keys_read * (d + d_v)  # Q K^T and P V
    return batch * total


def _written_out(learner_attention: Callable, forbidden: dict) -> Callable:
    """The learner's function, refused by name if it calls a forbidden function or runs
    torch's softmax in any spelling."""

    def learner(queries, keys, values, tile_size):
        with recording_calls(forbidden) as called, _SoftmaxCalls() as softmax:
            answer = learner_attention(queries, keys, values, tile_size)
        if called:
            raise _calls_refused(called)
        if softmax.seen:
            raise Refused(_SOFTMAX.format(softmax.seen[0]))
        return answer

    return learner


@exercise_checker
def check_causal_tiled_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, tile_size) -> (B, n, d_v): queries and keys
    (B, n, d), values (B, n, d_v), here B = 2, d = 32, d_v = 4, and n = 16, 10, 12 with tiles
    of 4, 4, 5 (n need not be a multiple of tile_size). Causal attention (query i attends to
    keys j <= i; every query reads at least itself, so no row is empty), scores q.k / sqrt(d),
    d the width of the queries and keys (not d_v), computed FlashAttention's way: a block of
    tile_size queries and a tile of tile_size keys at a time, with the online softmax,
    skipping the key tiles that lie wholly above the diagonal.

    The checker counts every multiplication, however it is spelled (a matrix product, or a
    broadcast multiply-and-sum): at most those of the tiles on and below the diagonal, plus 25%
    for the element-wise work. Any answer that computes no score above the diagonal tiles
    passes: a loop over single queries that reads only the keys up to each one, or a block of
    queries against all the keys up to the block's end in one product, with a two-pass
    softmax. What the online softmax saves, memory (one tile of scores at a time), is what a
    checker on a CPU cannot see; the tiles are what a GPU needs. Write the softmax out: torch's
    softmax in any spelling (torch.softmax, Tensor.softmax, F.softmax, nn.Softmax,
    log_softmax, logsumexp) is refused, as are helpers' masked_softmax and online_softmax,
    torch's and helpers' attention, tiled_attention and key_tile_steps."""
    generator = torch.Generator().manual_seed(12)
    forbidden = {
        **_FORBIDDEN_ATTENTION,
        "helpers.efficient.online_softmax": online_softmax,
        "helpers' masked_softmax": masked_softmax,
    }
    cases = [
        ("n = 16, tiles of 4", 16, 4),
        ("n = 10, tiles of 4", 10, 4),
        ("n = 12, tiles of 5", 12, 5),
    ]
    failures, passed = [], 0
    for name, n, tile_size in cases:
        batch, d, d_v = 2, 32, 4
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
                *args, tile_size, rescaled=()
            ),
            "the running output (the accumulator) is not rescaled when the maximum grows, only "
            "the running sum: multiply both by exp(m_old - m_new) before adding a tile": (
                _causal_tiles(*args, tile_size, rescaled=("normaliser",))
            ),
            "the running sum (the normaliser) is not rescaled when the maximum grows, only the "
            "running output: multiply both by exp(m_old - m_new) before adding a tile": (
                _causal_tiles(*args, tile_size, rescaled=("accumulator",))
            ),
            "the mask is strict: query i must read keys 0..i, itself included (j <= i), not "
            "only the keys before it (query 0 then reads none: 0 / 0 = NaN)": _causal_tiles(
                *args, tile_size, strict=True
            ),
            SCALED_BY_VALUE_WIDTH: _causal(queries * math.sqrt(d / d_v), keys, values),
            "the tile on the diagonal is skipped too (the first block then reads no key, 0 / "
            "0): read every key tile up to the one that holds the block's last query": (
                _causal_tiles(*args, tile_size, diagonal=False)
            ),
            "the tile on the diagonal is skipped too: read every key tile up to the one that "
            "holds the block's last query": _causal_tiles(
                *args, tile_size, diagonal=False, divide=1.0
            ),
        }
        if n % tile_size:
            mistakes[
                f"the last {n % tile_size} queries are zeros: "
                + not_a_multiple(n, tile_size, "tile", _SHORT_BLOCK)
            ] = whole_blocks_only(_causal, args, tile_size)
        learner = _written_out(learner_attention, forbidden)
        answers = {}

        def tiled(q, k, v, tile_size=tile_size, learner=learner, answers=answers):
            answers["got"] = learner(q, k, v, tile_size)
            return answers["got"]

        ok = run_case(
            name,
            tiled,
            args,
            _causal,
            failures,
            atol=1e-5,
            hint="softmax(q.k / sqrt(d)) over the keys 0..i for query i",
            mistakes=mistakes,
            names=("queries", "keys", "values"),
        )
        if not ok:
            name_a_partial_last_block(
                failures, name, answers.get("got"), n, tile_size, "tile", _SHORT_BLOCK
            )
        if ok:
            ok = _skips_the_upper_tiles(learner_attention, args, tile_size, name, failures)
        passed += ok
    return report(failures, passed)


_SHORT_BLOCK = "queries make a shorter block"


def _skips_the_upper_tiles(learner_attention, args, tile_size, name, failures) -> bool:
    queries, keys, values = args
    batch, n, d = queries.shape
    needed = _needed_multiplications(n, tile_size, d, values.shape[-1], batch)
    everything = batch * n * n * (d + values.shape[-1])
    try:
        with torch.no_grad(), _Multiplications() as counter:
            learner_attention(queries.clone(), keys.clone(), values.clone(), tile_size)
    except Exception as error:  # the learner's code may fail in any way
        failures.append(f"{name}: your function raised {type(error).__name__}: {error}")
        return False
    if counter.count <= needed * _SLACK:
        return True
    failures.append(
        f"{name}: the values are right, but it multiplies {counter.count} times where the "
        f"matrix products of the tiles on and below the diagonal take {needed} (of all tiles: "
        f"{everything}; the checker counts every multiplication, element-wise products such "
        f"as (a[:, :, None] * b[:, None]).sum(-1) included): it computes key tiles above the "
        f"diagonal; skip a tile whose first key comes after the block's last query (a mask "
        f"hides those scores, but they are still computed)"
    )
    return False
