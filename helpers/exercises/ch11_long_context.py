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
    TimedAnswers,
    exercise_checker,
    lower_precision_mistakes,
    name_a_partial_last_block,
    named_together,
    not_a_multiple,
    recording_calls,
    report,
    run_case,
    whole_blocks_only,
    wrong_only,
)
from helpers.long_context import (
    _linformer_attention,
    _lsh_attention,
    elu_feature_map,
    linear_attention,
    linear_attention_quadratic,
    linear_attention_weights,
    linformer_attention,
    lsh_attention,
    lsh_buckets,
    lsh_pairs,
)
from helpers.positional import alibi_bias, alibi_slopes, apply_rope

__all__ = [
    "check_alibi_attention",
    "check_chunked_linear_attention",
    "check_linformer_attention",
    "check_lsh_attention_round",
    "check_rope_half_split",
]


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


# 4. Linformer's attention over projected keys and values


def _linformer(queries, keys, values, key_projection, value_projection, scale=None, dim=-1):
    """Linformer's attention, or one of its typical mistakes: another scale, or the softmax
    over another axis."""
    scale = math.sqrt(queries.shape[-1]) if scale is None else scale
    scores = queries @ (key_projection @ keys).transpose(-2, -1) / scale  # (..., n_q, k)
    return torch.softmax(scores, dim=dim) @ (value_projection @ values)


@exercise_checker
def check_linformer_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, key_projection, value_projection) ->
    (..., n_q, d_v): queries (..., n_q, d), keys (..., n, d), values (..., n, d_v) and the
    projections E = key_projection and F = value_projection, both (k, n). Softmax attention
    over the k projected keys E K and values F V: softmax(Q (E K)^T / sqrt(d)) (F V), d the
    width of the queries and keys. Cases: (n_q, n, d, d_v, k) = (12, 12, 4, 3, 4), leading dims
    (2, 3) with (10, 10, 4, 5, 3), (5, 8, 4, 2, 8) (five queries over eight keys, k = n) and
    float64 (6, 6, 3, 3, 2). The inputs are left as they were. Without helpers.long_context's
    linformer_attention, torch's scaled_dot_product_attention or helpers' DotProductAttention."""
    generator = torch.Generator().manual_seed(14)
    cases = [
        ("n = 12, d = 4, d_v = 3, k = 4", (), 12, 12, 4, 3, 4, torch.float32),
        ("(B=2, heads=3), n = 10, d = 4, d_v = 5, k = 3", (2, 3), 10, 10, 4, 5, 3, torch.float32),
        ("5 queries over 8 keys, d = 4, d_v = 2, k = n = 8", (), 5, 8, 4, 2, 8, torch.float32),
        ("float64, n = 6, d = d_v = 3, k = 2", (), 6, 6, 3, 3, 2, torch.float64),
    ]
    failures, passed, answers = [], 0, TimedAnswers(learner_attention)
    for name, leading, n_q, n, d, d_v, k, dtype in cases:

        def drawn(*shape, dtype=dtype):
            return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)

        queries, keys, values = (
            drawn(*leading, n_q, d),
            drawn(*leading, n, d),
            drawn(*leading, n, d_v),
        )
        E, F_ = drawn(k, n) / math.sqrt(n), drawn(k, n) / math.sqrt(n)
        args = (queries, keys, values, E, F_)
        mistakes = {
            "E and F are swapped: the keys are projected by key_projection (E K) and the values "
            "by value_projection (F V)": _linformer(queries, keys, values, F_, E),
            "the scores are not divided by sqrt(d)": _linformer(*args, scale=1.0),
            "the scores are divided by sqrt(k), the number of projected positions: the scale is "
            "sqrt(d), the width of the queries and keys": _linformer(*args, scale=math.sqrt(k)),
            SCALED_BY_VALUE_WIDTH: _linformer(*args, scale=math.sqrt(d_v)),
            "the softmax runs over the queries (dim=-2): each query's weights over the k "
            "projected keys sum to 1 (dim=-1)": _linformer(*args, dim=-2),
            **lower_precision_mistakes(
                lambda q, rest=args[1:]: _linformer(q, *(t.to(q.dtype) for t in rest)),
                queries,
                "inputs",
            ),
        }
        passed += run_case(
            name,
            answers,
            args,
            _linformer,
            failures,
            atol=1e-5 if dtype == torch.float32 else 1e-12,
            hint="softmax(Q (E K)^T / sqrt(d)) (F V), E = key_projection and F = value_projection",
            mistakes=wrong_only(mistakes, _linformer(*args)),
            forbidden={
                "helpers.long_context.linformer_attention": linformer_attention,
                "helpers.long_context._linformer_attention": _linformer_attention,
                "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
                "helpers' DotProductAttention": DotProductAttention.forward,
            },
            names=("queries", "keys", "values", "key_projection", "value_projection"),
        )
    return report(failures, passed)


# 5. One round of LSH attention, in sorted chunks


def _lsh_round(
    queries,
    values,
    buckets,
    chunk_size,
    unit_keys=True,
    look="back",
    wrap=True,
    itself="alone",
    same_bucket=True,
    scale=None,
    unsorted=True,
    ties="position",
    unit_queries=False,
    unit_values=False,
):
    """One round of LSH attention through an (n, n) mask, or one of its typical mistakes: keys
    not made unit length, a chunk that looks at no other chunk, or at the one after it, or
    back without wrapping round to the last; a query that always or never reads itself; no
    bucket test; another scale; the output left in sorted order; ties sorted backwards."""
    n, d = queries.shape[-2:]
    keys = queries / queries.norm(dim=-1, keepdim=True) if unit_keys else queries
    queries = queries / queries.norm(dim=-1, keepdim=True) if unit_queries else queries
    values = values / values.norm(dim=-1, keepdim=True) if unit_values else values
    positions = torch.arange(n)
    tie_order = positions if ties == "position" else n - 1 - positions
    order = (buckets * n + tie_order).argsort(dim=-1)  # (..., n)
    chunk = order.argsort(dim=-1) // chunk_size  # (..., n): each position's chunk
    chunks = n // chunk_size
    near = chunk[..., :, None] == chunk[..., None, :]  # (..., q, k)
    if chunks > 1 and look != "own":
        step = 1 if look == "back" else -1
        other = chunk[..., None, :] + step  # the query's chunk is the key's plus step
        near = near | (chunk[..., :, None] == (other % chunks if wrap else other))
    allowed = near & (buckets[..., :, None] == buckets[..., None, :]) if same_bucket else near
    diagonal = torch.eye(n, dtype=torch.bool)
    if itself == "alone":
        others = allowed & ~diagonal
        allowed = torch.where(others.any(dim=-1, keepdim=True), others, diagonal)
    elif itself == "never":
        allowed = allowed & ~diagonal
    scale = math.sqrt(d) if scale is None else scale
    scores = (queries @ keys.transpose(-2, -1) / scale).masked_fill(~allowed, float("-inf"))
    output = torch.softmax(scores, dim=-1) @ values  # (..., n, d_v)
    if unsorted == "by the order":  # sorted, then "put back" by the order itself
        index = order[..., None].expand_as(output)
        output = output.gather(-2, index).gather(-2, index)
    elif not unsorted:
        output = output.gather(-2, order[..., None].expand_as(output))
    return output


class _WholeSquare(OperationsWatcher):
    """Records the first torch operation inside it that returns an (..., n, n) tensor: the
    matrix of every query and key that sorted chunks never make."""

    def __init__(self, n: int):
        super().__init__()
        self.n, self.seen = n, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.seen is None and isinstance(out, torch.Tensor) and out.dim() >= 2:
            if list(out.shape[-2:]) == [self.n, self.n]:
                self.seen = (func.overloadpacket.__name__, tuple(out.shape))
        return out


_FORBIDDEN_LSH = {
    "helpers.long_context.lsh_attention": lsh_attention,
    "helpers.long_context._lsh_attention": _lsh_attention,
    "helpers.long_context.lsh_pairs": lsh_pairs,
}


def _sorted_chunks_only(learner_lsh: Callable, judge_memory: bool) -> Callable:
    """The learner's function, refused by name if it calls helpers' LSH attention or (where
    judge_memory) builds an (..., n, n) tensor."""

    def learner(queries, values, buckets, chunk_size):
        with recording_calls(_FORBIDDEN_LSH) as called, _WholeSquare(queries.shape[-2]) as square:
            answer = learner_lsh(queries, values, buckets, chunk_size)
        if called:
            raise Refused(f"calls {called[0]}, which this exercise asks you to write yourself")
        if judge_memory and square.seen:
            operation, shape = square.seen
            raise Refused(
                f"builds a matrix of every query and key, shape {shape} (torch's "
                f"aten.{operation}): that is the n x n mask the chapter draws, whose cost grows "
                f"like n^2; sort the positions, cut them into chunks, and score each chunk "
                f"against itself and the chunk before it, (..., n / c, c, 2c) scores"
            )
        return answer

    return learner


def lsh_round_cases() -> list[tuple]:
    """(name, queries (..., n, d), values (..., n, d_v), buckets (..., n), chunk_size)."""
    generator = torch.Generator().manual_seed(15)

    def case(name, leading, n, d, d_v, chunk_size, num_buckets, dtype=torch.float32, ids=None):
        queries = torch.randn(*leading, n, d, generator=generator, dtype=torch.float64)
        values = torch.randn(*leading, n, d_v, generator=generator, dtype=torch.float64)
        if ids is None:
            ids = lsh_buckets(queries, num_buckets, generator)
        return name, queries.to(dtype), values.to(dtype), ids, chunk_size

    return [
        case("n = 16, chunks of 4, 4 buckets", (), 16, 4, 3, 4, 4),
        case("(B=2), n = 12, chunks of 3, 2 buckets, d_v = 2", (2,), 12, 4, 2, 3, 2),
        case(
            "n = 8, chunks of 2, one query alone in its bucket (it reads itself)",
            (),
            8,
            3,
            3,
            2,
            0,
            ids=torch.tensor([1, 0, 1, 1, 2, 1, 1, 1]),
        ),
        case("float64, n = 12, chunks of 4, 6 buckets", (), 12, 5, 4, 4, 6, torch.float64),
        case("n = 6, one chunk of 6, 2 buckets", (), 6, 4, 3, 6, 2),
    ]


@exercise_checker
def check_lsh_attention_round(learner_lsh: Callable) -> bool:
    """learner_lsh(queries, values, buckets, chunk_size) -> (..., n, d_v): one round of
    Reformer's LSH attention. queries (..., n, d), each key the query made unit length; values
    (..., n, d_v); buckets (..., n) int64; chunk_size divides n. Sort the positions by bucket,
    then by position; cut the sorted order into chunks of chunk_size; each query attends to
    the keys of its own bucket in its own chunk and the chunk before it (the first chunk looks
    back to the last; a single chunk only to itself), but not to itself unless it has no other
    such key; scores q.k / sqrt(d); softmax; weighted sum; each output back at its query's
    position. Refused: an (..., n, n) tensor where there is more than one chunk (sorted chunks
    never make one), and helpers.long_context's lsh_attention and lsh_pairs. The inputs are
    left as they were."""
    failures, passed, timed = [], 0, TimedAnswers(learner_lsh)
    for name, queries, values, buckets, chunk_size in lsh_round_cases():
        args = (queries, values, buckets, chunk_size)
        n = queries.shape[-2]
        mistakes = {
            "the keys are the queries themselves: Reformer's keys are the queries made unit "
            "length, q / |q|": _lsh_round(*args, unit_keys=False),
            "each chunk reads only itself: it also reads the chunk before it (a pair that the "
            "sort puts on either side of a chunk border stays together)": _lsh_round(
                *args, look="own"
            ),
            "the first chunk reads no chunk before it: it looks back to the last chunk, "
            "(chunk - 1) % chunks, as Reformer wraps round": _lsh_round(*args, wrap=False),
            "each chunk reads the chunk AFTER it: it reads the one before it": _lsh_round(
                *args, look="ahead"
            ),
            "a query reads its own key even when it has others: it reads itself only when "
            "no other key of its bucket is in reach": _lsh_round(*args, itself="always"),
            "a query alone in its bucket reads nothing (NaN): it reads itself when it has no "
            "other key": _lsh_round(*args, itself="never"),
            "every key in reach is read, whatever its bucket: only the keys of the query's own "
            "bucket": _lsh_round(*args, same_bucket=False),
            "the scores are not divided by sqrt(d)": _lsh_round(*args, scale=1.0),
            "the outputs are left in sorted order: put each back at its query's position "
            "(scatter by the sort order, or gather by its inverse, order.argsort())": _lsh_round(
                *args, unsorted=False
            ),
            "within a bucket the positions are sorted backwards (or in no set order): sort by "
            "bucket, then by position (bucket * n + position, or a stable sort)": _lsh_round(
                *args, ties="reversed"
            ),
            "the queries are made unit length too: only the keys are (each key is its query "
            "divided by its length); the scores are q . k / sqrt(d) with the query as it "
            "came": _lsh_round(*args, unit_queries=True),
            "the values are made unit length: only the keys are; the outputs weigh the values "
            "as they came": _lsh_round(*args, unit_values=True),
            "the outputs are put back by the sort order itself (gather by order): the sorted "
            "output at index i belongs to position order[i], so scatter it there, or gather "
            "by the inverse permutation, order.argsort()": _lsh_round(
                *args, unsorted="by the order"
            ),
            "the scores are divided by sqrt(chunk_size): the scale is sqrt(d), the width of the "
            "queries and keys": _lsh_round(*args, scale=math.sqrt(chunk_size)),
            SCALED_BY_VALUE_WIDTH: _lsh_round(*args, scale=math.sqrt(values.shape[-1])),
            **lower_precision_mistakes(
                lambda q, v=values, rest=args[2:]: _lsh_round(q, v.to(q.dtype), *rest),
                queries,
                "inputs",
            ),
        }
        learner = _sorted_chunks_only(timed, judge_memory=chunk_size < n)
        passed += run_case(
            name,
            learner,
            args,
            _lsh_round,
            failures,
            atol=1e-5 if queries.dtype == torch.float32 else 1e-12,
            hint="each query reads the keys of its bucket in its chunk and the one before",
            mistakes=wrong_only(named_together(mistakes), _lsh_round(*args)),
            names=("queries", "values", "buckets", "chunk_size"),
        )
    return report(failures, passed)
