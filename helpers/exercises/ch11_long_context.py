"""Chapter 11's exercises: positions and patterns for long sequences."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import DotProductAttention
from helpers.exercises.framework import (
    SCALED_BY_VALUE_WIDTH,
    OperationsWatcher,
    Refused,
    exercise_checker,
    name_a_partial_last_block,
    not_a_multiple,
    recording_calls,
    report,
    run_case,
    whole_blocks_only,
)
from helpers.long_context import (
    elu_feature_map,
    linear_attention,
    linear_attention_quadratic,
    linear_attention_weights,
)
from helpers.positional import alibi_bias, alibi_slopes, apply_rope

__all__ = ["check_alibi_attention", "check_chunked_linear_attention", "check_rope_half_split"]


def _interleaving(d: int) -> torch.Tensor:
    """The order that puts dimension j next to j + d/2: 0, d/2, 1, d/2 + 1, ..."""
    half = torch.arange(d // 2)
    return torch.stack([half, half + d // 2], dim=-1).flatten()


def _half_split_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0):
    """RoPE with dimension j paired with j + d/2: apply_rope on the interleaved dimensions."""
    order = _interleaving(x.shape[-1])
    return apply_rope(x[..., order], positions, base)[..., order.argsort()]


@exercise_checker
def check_rope_half_split(learner_rope: Callable) -> bool:
    """learner_rope(x, positions) -> x rotated by RoPE (base 10000) in the "rotate half" layout
    of GPT-NeoX and Hugging Face's LLaMA: dimension j (j < d/2) is paired with dimension
    j + d/2, and the pair turns by positions * 10000^(-2j/d). x (..., seq, d), positions
    (seq,). Without helpers.positional.apply_rope."""
    generator = torch.Generator().manual_seed(11)
    cases = [
        ("one sequence, d = 8, positions 0..4", (5, 8), torch.arange(5), torch.float32),
        (
            "(B=2, heads=3, seq=4, d=16), positions 7, 3, 100, 2",
            (2, 3, 4, 16),
            torch.tensor([7, 3, 100, 2]),
            torch.float32,
        ),
        (
            "float64, d = 6, positions 1000..1002",
            (3, 6),
            torch.tensor([1000, 1001, 1002]),
            torch.float64,
        ),
    ]
    failures, passed = [], 0
    for name, shape, positions, dtype in cases:
        x = torch.randn(shape, generator=generator, dtype=dtype)
        d = shape[-1]
        order = _interleaving(d)
        steps = torch.arange(x.shape[-2])
        slow = 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)  # 2j/d -> j/d
        angles = positions.double()[:, None] * slow  # (seq, d / 2)
        first, second = x[..., : d // 2], x[..., d // 2 :]
        cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
        mistakes = {
            "pairs neighbouring dimensions (2j, 2j + 1), the layout of apply_rope: here "
            "dimension j pairs with j + d/2": apply_rope(x, positions),
            "turns the wrong way: the first half becomes x1 cos - x2 sin, the second "
            "x1 sin + x2 cos": _half_split_rope(x, -positions),
            "the frequencies are 10000^(-2j/d) for pair j, not 10000^(-j/d)": torch.cat(
                [first * cos - second * sin, first * sin + second * cos], dim=-1
            ),
        }
        mistakes[
            "the two halves of the output are swapped: the first half is x1 cos - x2 sin, the "
            "second x1 sin + x2 cos"
        ] = _half_split_rope(x, positions).roll(d // 2, dims=-1)
        mistakes["turns by (position + 1) * w_j: turn by the `positions` given, as they are"] = (
            _half_split_rope(x, positions + 1)
        )
        if not torch.equal(positions, steps):
            mistakes["uses positions 0, 1, 2, ... instead of the `positions` given"] = (
                _half_split_rope(x, steps)
            )
        if d > 2:
            mistakes[
                "the halves are interleaved after turning: keep them as two halves, "
                "cat([x1 cos - x2 sin, x1 sin + x2 cos], -1)"
            ] = apply_rope(x[..., order], positions)
        answers = {}

        def learner(x, p, answers=answers):
            answers["got"] = learner_rope(x, p)
            return answers["got"]

        right = run_case(
            name,
            learner,
            (x, positions),
            _half_split_rope,
            failures,
            atol=5e-5 if dtype == torch.float32 else 1e-10,
            hint="dimension j pairs with j + d/2 and turns by position * 10000^(-2j/d)",
            mistakes=mistakes,
            forbidden={"helpers.positional.apply_rope": apply_rope},
            names=("x", "positions"),
        )
        if not right and failures[-1].startswith(f"{name}: at index"):
            _name_lost_precision(failures, name, answers.get("got"), _half_split_rope(x, positions))
        passed += right
    return report(failures, passed)


def _name_lost_precision(failures: list, name: str, got, expected: torch.Tensor) -> None:
    """Replace a value failure by its likely cause when the answer is right to about four
    decimals only: angles computed in float32 for a float64 input at large positions."""
    if (
        isinstance(got, torch.Tensor)
        and got.shape == expected.shape
        and got.dtype == expected.dtype == torch.float64
        and torch.allclose(got.detach(), expected, atol=1e-3, rtol=0)
    ):
        failures[-1] = (
            f"{name}: right to about four decimals only: the angles position * w_j lose "
            f"precision in float32, which keeps about 7 significant digits of a number near "
            f"1000. For a float64 x, compute them in float64 (positions.double() times "
            f"frequencies in float64), as apply_rope does"
        )


def _alibi_attention(queries, keys, values):
    heads, num_queries, num_keys = queries.shape[1], queries.shape[2], keys.shape[2]
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    bias = alibi_bias(heads, num_queries, num_keys).to(scores)  # (heads, q, k)
    query_positions = torch.arange(num_keys - num_queries, num_keys)
    causal = torch.arange(num_keys)[None, :] <= query_positions[:, None]  # (q, k)
    weights = torch.softmax((scores + bias).masked_fill(~causal, float("-inf")), dim=-1)
    return weights @ values


def _attention_with(queries, keys, values, slopes=None, first_query=None, causal=True, sign=-1):
    """Causal attention with a linear distance bias, built to reproduce a mistake."""
    heads, num_queries, num_keys = queries.shape[1], queries.shape[2], keys.shape[2]
    slopes = alibi_slopes(heads) if slopes is None else slopes
    first_query = num_keys - num_queries if first_query is None else first_query
    query_positions = torch.arange(first_query, first_query + num_queries)
    distance = (query_positions[:, None] - torch.arange(num_keys)[None, :]).abs()  # (q, k)
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    scores = scores + sign * slopes[:, None, None].to(scores) * distance.to(scores)
    if causal:
        allowed = torch.arange(num_keys)[None, :] <= query_positions[:, None]
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


@exercise_checker
def check_alibi_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values) -> (B, heads, q, d_v): causal attention with
    ALiBi. queries (B, heads, q, d), keys (B, heads, k, d), values (B, heads, k, d_v), here
    B = 2, d = 4, d_v = 3, q <= k: the queries are the last q of the k positions (q = 1 is one
    decoding step with a cache), so every query reads at least its own key.
    Scores q.k / sqrt(d) (d the width of the queries and keys, not d_v), plus
    -slope_h * (i - j) with Press et al.'s slopes for any number of heads, no key after the
    query; softmax; weighted sum. Without helpers' alibi_bias or alibi_slopes, torch's
    scaled_dot_product_attention or DotProductAttention."""
    generator = torch.Generator().manual_seed(12)
    cases = [
        ("8 heads, 5 queries over 5 keys", 8, 5, 5),
        ("6 heads (not a power of two), 4 queries over 4 keys", 6, 4, 4),
        ("4 heads, one decoding step: 1 query over 7 keys", 4, 1, 7),
        ("3 heads, the last 3 of 6 positions", 3, 3, 6),
    ]
    failures, passed = [], 0
    for name, heads, num_queries, num_keys in cases:
        d, d_v = 4, 3
        queries = torch.randn(2, heads, num_queries, d, generator=generator)
        keys = torch.randn(2, heads, num_keys, d, generator=generator)
        values = torch.randn(2, heads, num_keys, d_v, generator=generator)
        args = (queries, keys, values)
        naive = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])
        mistakes = {
            "the bias has the wrong sign: a distant key loses score, -slope * distance": (
                _attention_with(*args, sign=1)
            ),
            "no causal mask: a query must not see the keys after it": _attention_with(
                *args, causal=False
            ),
            "no ALiBi bias at all": _attention_with(*args, slopes=torch.zeros(heads)),
            "the slopes are in reverse order: the first head has the steepest slope, "
            "2^(-8/heads), and each next head a flatter one": _attention_with(
                *args, slopes=alibi_slopes(heads).flip(0)
            ),
            "the scores are not divided by sqrt(d)": _attention_with(
                queries * math.sqrt(d), keys, values
            ),
            SCALED_BY_VALUE_WIDTH: _attention_with(queries * math.sqrt(d / d_v), keys, values),
        }
        if num_queries < num_keys:
            mistakes[
                "the queries are the last q positions (k - q .. k - 1), not positions 0 .. q - 1: "
                "their distances and causal mask start at k - q"
            ] = _attention_with(*args, first_query=0)
        if heads & (heads - 1):
            mistakes[
                "for a number of heads that is not a power of two, Press et al. take the slopes "
                "of the power of two below, then every other slope of the next one; not "
                "2^(-8h/heads)"
            ] = _attention_with(*args, slopes=naive)
        passed += run_case(
            name,
            learner_attention,
            args,
            _alibi_attention,
            failures,
            atol=1e-5,
            hint="softmax(q.k / sqrt(d) - slope_h * (i - j)) over the keys j <= i",
            mistakes=mistakes,
            forbidden={
                "helpers.positional.alibi_bias": alibi_bias,
                "helpers.positional.alibi_slopes": alibi_slopes,
                "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
                "helpers' DotProductAttention": DotProductAttention.forward,
            },
            names=("queries", "keys", "values"),
        )
    return report(failures, passed)


def _chunked(
    queries,
    keys,
    values,
    chunk_size,
    mask_inside=True,
    carried=("state", "normaliser"),
    add_first=False,
    phi=None,
):
    """Chunked causal linear attention, or one of its typical mistakes: no mask inside a chunk,
    the chunk added to the state before it reads it, another feature map, or `carried` (from
    chunk to chunk) without the state S or the normaliser z, or both."""
    phi = elu_feature_map if phi is None else phi
    phi_q, phi_k = phi(queries), phi(keys)
    state = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1], values.shape[-1])
    normaliser = phi_k.new_zeros(*phi_k.shape[:-2], phi_k.shape[-1])
    pieces = []
    for start in range(0, queries.shape[-2], chunk_size):
        q, k, v = (t[..., start : start + chunk_size, :] for t in (phi_q, phi_k, values))
        similarity = q @ k.transpose(-2, -1)  # (..., c, c)
        if mask_inside:
            similarity = similarity.tril()
        if add_first:
            state = state + k.transpose(-2, -1) @ v
            normaliser = normaliser + k.sum(-2)
        numerator = similarity @ v + q @ state
        denominator = similarity.sum(-1, keepdim=True) + q @ normaliser[..., None]
        pieces.append(numerator / denominator)
        if "state" in carried and not add_first:
            state = state + k.transpose(-2, -1) @ v
        if "normaliser" in carried and not add_first:
            normaliser = normaliser + k.sum(-2)
    return torch.cat(pieces, dim=-2)


def _causal_linear(queries, keys, values):
    return linear_attention(queries, keys, values, causal=True)


_SHORT_CHUNK = "positions make a shorter chunk"


def _unnormalised(queries, keys, values):
    similarity = elu_feature_map(queries) @ elu_feature_map(keys).transpose(-2, -1)
    return similarity.tril() @ values


def _causal_softmax(queries, keys, values):
    n = queries.shape[-2]
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    future = ~torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ values


class _WholeSequence(OperationsWatcher):
    """Records the first torch operation inside it whose result spans the whole sequence of n
    positions where a chunked computation needs no such thing: an (..., n, n) matrix, or a
    state per position, (..., n, d, d_v)."""

    def __init__(self, n: int, d: int, d_v: int):
        super().__init__()
        self.n, self.widths, self.seen = n, sorted((d, d_v)), None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.seen is None and isinstance(out, torch.Tensor):
            shape = list(out.shape)
            if shape[-2:] == [self.n, self.n]:
                self.seen = ("matrix", func.overloadpacket.__name__, tuple(shape))
            elif len(shape) >= 3 and shape[-3] == self.n and sorted(shape[-2:]) == self.widths:
                self.seen = ("states", func.overloadpacket.__name__, tuple(shape))
        return out


_WHOLE_SEQUENCE = {
    "matrix": (
        "builds a matrix over the whole sequence, shape {shape} (torch's aten.{operation}): "
        "the values are right, but that is the quadratic form, not chunks; inside a chunk only "
        "a chunk_size x chunk_size block, and the earlier chunks through the carried state"
    ),
    "states": (
        "keeps a state for every position, shape {shape} (torch's aten.{operation}: one "
        "cumulative sum over the whole sequence): the values are right, but its memory grows "
        "with n; carry one state of d x d_v (and its normaliser) from chunk to chunk instead"
    ),
}

_FORBIDDEN_LINEAR = {
    "helpers.long_context.linear_attention": linear_attention,
    "helpers.long_context.linear_attention_quadratic": linear_attention_quadratic,
    "helpers.long_context.linear_attention_weights": linear_attention_weights,
}


def _in_chunks(learner_chunked: Callable, chunk_size: int, judge_memory: bool) -> Callable:
    """The learner's function with chunk_size given, refused by name if it calls helpers'
    linear attention or (where judge_memory) builds something that spans the whole sequence."""

    def learner(queries, keys, values):
        n, d, d_v = queries.shape[-2], keys.shape[-1], values.shape[-1]
        with recording_calls(_FORBIDDEN_LINEAR) as called, _WholeSequence(n, d, d_v) as whole:
            answer = learner_chunked(queries, keys, values, chunk_size)
        if called:
            raise Refused(f"calls {called[0]}, which this exercise asks you to write yourself")
        if judge_memory and whole.seen:
            kind, operation, shape = whole.seen
            raise Refused(_WHOLE_SEQUENCE[kind].format(operation=operation, shape=shape))
        return answer

    return learner


@exercise_checker
def check_chunked_linear_attention(learner_chunked: Callable) -> bool:
    """learner_chunked(queries, keys, values, chunk_size) -> (..., n, d_v): queries and keys
    (..., n, d), values (..., n, d_v), here d = d_v = 3 or 2 and n = 8, 10, 6, 5 with chunks of
    4, 4, 1, 8 (n need not be a multiple of chunk_size). Causal linear attention with
    phi(x) = elu(x) + 1 (every query reads at least its own key, so no row is empty),
    computed chunk by chunk: inside a chunk the quadratic form with a causal mask, from the
    chunks before it a state, S (the sum of phi(k) v^T, d x d_v) and z (the sum of phi(k), d),
    carried from chunk to chunk. Answers that do not chunk are refused, by what they build: a
    matrix over the whole sequence (..., n, n), or a state for every position (..., n, d, d_v),
    one cumulative sum over the sequence. A loop over single positions that carries S and z
    from each one to the next passes too: it builds neither, and it is chunks of one. Without
    helpers.long_context's linear attention functions."""
    generator = torch.Generator().manual_seed(13)
    cases = [
        ("n = 8, chunks of 4", (8, 3), 4),
        ("(B=2, heads=2, n=10), chunks of 4 (the last one holds 2)", (2, 2, 10, 3), 4),
        ("n = 6, chunks of 1", (6, 2), 1),
        ("n = 5, one chunk of 8", (5, 3), 8),
    ]
    failures, passed = [], 0
    for name, shape, chunk_size in cases:
        queries = torch.randn(shape, generator=generator)
        keys = torch.randn(shape, generator=generator)
        values = torch.randn(shape, generator=generator)
        args = (queries, keys, values)
        mistakes = {
            "no causal mask inside a chunk: a query reads the later keys of its own chunk": (
                _chunked(*args, chunk_size, mask_inside=False)
            ),
            "not normalised: divide by phi(q_i) . (sum of phi(k_j) over j <= i)": _unnormalised(
                *args
            ),
            "softmax weights: linear attention's weights are phi(q).phi(k) / their sum": (
                _causal_softmax(*args)
            ),
            "the feature map is phi(x) = elu(x) + 1, not exp(x)": _chunked(
                *args, chunk_size, phi=torch.exp
            ),
            "each chunk's phi(k) v^T and phi(k) are added to the state before the chunk reads "
            "it: its queries then see the later keys of their own chunk and count the earlier "
            "ones twice. Read the state of the chunks before, then add this chunk's sums": (
                _chunked(*args, chunk_size, add_first=True)
            ),
        }
        if chunk_size < shape[-2]:
            mistakes[
                "the state is not carried: each chunk must also read every earlier chunk, "
                "through the running sums of phi(k) v^T and phi(k)"
            ] = _chunked(*args, chunk_size, carried=())
            mistakes[
                "the state S (the sum of phi(k) v^T) is carried from chunk to chunk, but not the "
                "normaliser z (the sum of phi(k)): each query's denominator must add "
                "phi(q_i) . z of the chunks before its own"
            ] = _chunked(*args, chunk_size, carried=("state",))
            mistakes[
                "the normaliser z (the sum of phi(k)) is carried from chunk to chunk, but not the "
                "state S (the sum of phi(k) v^T): each query's numerator must add phi(q_i) . S "
                "of the chunks before its own"
            ] = _chunked(*args, chunk_size, carried=("normaliser",))
        n = shape[-2]
        if n % chunk_size:
            mistakes[
                f"the last {n % chunk_size} positions are zeros: "
                + not_a_multiple(n, chunk_size, "chunk", _SHORT_CHUNK)
            ] = whole_blocks_only(_causal_linear, args, chunk_size)
        # With chunks of 1 a state per chunk is a state per position; one chunk holds all.
        judge_memory = 1 < chunk_size < shape[-2]
        learner = _in_chunks(learner_chunked, chunk_size, judge_memory)
        answers = {}

        def chunked(q, k, v, learner=learner, answers=answers):
            answers["got"] = learner(q, k, v)
            return answers["got"]

        ok = run_case(
            name,
            chunked,
            args,
            _causal_linear,
            failures,
            atol=1e-5,
            hint="output i = phi(q_i) . sum_{j<=i} phi(k_j) v_j^T / phi(q_i) . sum_{j<=i} phi(k_j)",
            mistakes=mistakes,
            names=("queries", "keys", "values"),
        )
        if not ok:
            name_a_partial_last_block(
                failures, name, answers.get("got"), n, chunk_size, "chunk", _SHORT_CHUNK
            )
        passed += ok
    return report(failures, passed)
