"""Chapter 06's exercises: masks."""

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import DotProductAttention, MultiHeadAttention, masked_softmax
from helpers.exercises.framework import Refused, exercise_checker, report, run_case
from helpers.masks import causal_mask, causal_padding_mask, padding_mask

__all__ = ["check_cached_decoding_with_pads", "check_cross_attention", "check_sliding_window"]

_MASK_BUILDERS = {
    "helpers.masks.padding_mask": padding_mask,
    "helpers.masks.causal_mask": causal_mask,
    "helpers.masks.causal_padding_mask": causal_padding_mask,
}


def _cross_attention(queries, memory, source_tokens, pad_id):
    scores = queries @ memory.mT / math.sqrt(queries.shape[-1])  # (B, T, S)
    return masked_softmax(scores, mask=(source_tokens != pad_id)[:, None, :]) @ memory


@exercise_checker
def check_cross_attention(learner_cross_attention: Callable) -> bool:
    """learner_cross_attention(queries, memory, source_tokens, pad_id) -> (B, T, d): queries
    (B, T, d) from the target attend to memory (B, S, d), the encoder's output, used as keys
    and values alike, with scaled dot-product scores and no weight on the source's pads. A
    source may be nothing but pads: its queries read nothing, so their rows are zeros, with a
    finite gradient. Without torch's or helpers' attention, helpers' masked_softmax and
    helpers.masks: the masked softmax is the learner's to write."""
    pad = 0
    generator = torch.Generator().manual_seed(8)
    cases = [
        ("T = 3 queries, S = 5 keys, right-padded source", 3, torch.tensor([[5, 6, 7, 0, 0]])),
        (
            "T = 6 queries, S = 4 keys, left padding and a pad in the middle",
            6,
            torch.tensor([[0, 5, 6, 7], [5, 0, 6, 7]]),
        ),
        ("T = S = 4", 4, torch.tensor([[5, 6, 0, 0], [5, 6, 7, 8]])),
        (
            "T = 3 queries, a second source of nothing but pads",
            3,
            torch.tensor([[5, 6, 7, 0, 0], [0, 0, 0, 0, 0]]),
        ),
    ]
    failures, passed = [], 0
    for name, length, source in cases:
        batch, d = source.shape[0], 8
        queries = torch.randn(batch, length, d, generator=generator)
        memory = torch.randn(batch, source.shape[1], d, generator=generator)
        scores = queries @ memory.mT / math.sqrt(d)
        keys_mask = (source != pad)[:, None, :]
        empty = not keys_mask.any(-1).all()
        mistakes = {
            "the scores are not divided by sqrt(d)": masked_softmax(
                scores * math.sqrt(d), mask=keys_mask
            )
            @ memory,
            "the source's pad keys are read: hide the keys where source_tokens == pad_id": (
                torch.softmax(scores, -1) @ memory
            ),
            "softmax over the queries axis: each query's weights over the source keys (the last "
            "axis) must sum to 1": torch.softmax(scores.masked_fill(~keys_mask, -1e9), 1) @ memory,
        }
        if length == source.shape[1]:
            mistakes[
                "the mask hides query rows, not key columns: shape it (B, 1, S) so that it "
                "broadcasts over the T queries"
            ] = masked_softmax(scores, mask=(source != pad)[:, :, None]) @ memory
        if empty:
            mistakes[
                "a source of only pads leaves its queries no key: a softmax over nothing but "
                "-inf is 0/0 = NaN; such a row must be all zeros (softmax a finite dummy row, "
                "then zero it)"
            ] = torch.softmax(scores.masked_fill(~keys_mask, float("-inf")), -1) @ memory
            mistakes[
                "a large negative fill gives a query with no real source key the same weight on "
                "every pad, so it reads the pads: such a row must be all zeros"
            ] = torch.softmax(scores.masked_fill(~keys_mask, -1e9), -1) @ memory
        passed += run_case(
            name,
            lambda q, m, s: learner_cross_attention(q, m, s, pad),
            (queries, memory, source),
            lambda q, m, s: _cross_attention(q, m, s, pad),
            failures,
            atol=1e-5,
            hint="softmax(Q M^T / sqrt(d)) M over the non-pad source keys"
            + ("; a query with no real source key gets a row of zeros (not NaN)" if empty else ""),
            mistakes=mistakes,
            forbidden={
                "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
                "helpers' DotProductAttention": DotProductAttention.forward,
                "helpers' MultiHeadAttention": MultiHeadAttention.forward,
                "helpers' masked_softmax": masked_softmax,
                **_MASK_BUILDERS,
            },
            names=("queries", "memory", "source_tokens"),
        )
    return report(failures, passed)


_NO_HEAD_AXIS = (
    "a mask (B, q, k) without a head axis lines its batch axis up with the heads axis of the "
    "scores (B, heads, q, k): add the head axis: mask[:, None]"
)


def _batch_met_heads(error: Exception, batch: int, heads: int, n: int) -> bool:
    """Whether an error is what a (B, q, k) mask meeting (B, heads, q, k) scores raises:
    helpers' masked_softmax names both shapes, torch names the sizes at dimension 1."""
    message = str(error)
    if f"({batch}, {n}, {n}) cannot broadcast to scores of shape" in message:
        return True
    sizes = ((batch, heads), (heads, batch))
    return "at non-singleton dimension 1" in message and any(
        f"tensor a ({a})" in message and f"tensor b ({b})" in message for a, b in sizes
    )


def _window_mask(tokens, pad_id, window):
    positions = torch.arange(tokens.shape[1])
    offset = positions[:, None] - positions[None, :]  # (q, k): i - j
    in_window = (offset >= 0) & (offset < window)  # keys i - window + 1 .. i
    return in_window & (tokens != pad_id)[:, None, :]  # (B, q, k)


@exercise_checker
def check_sliding_window(learner_weights: Callable) -> bool:
    """learner_weights(scores, tokens, pad_id, window) -> (B, heads, n, n) attention weights:
    query i attends to the non-pad keys j with i - window < j <= i (the last `window`
    positions, itself included); a query with no such key gets a row of zeros. Masking the pad
    queries' rows as well is right too. Without the mask builders of helpers.masks (helpers'
    masked_softmax is allowed)."""
    pad = 0
    generator = torch.Generator().manual_seed(9)
    cases = [
        ("right padding, window 2, one head", torch.tensor([[5, 6, 7, 8, 0, 0]]), 2, 1),
        (
            "left padding, window 3, two heads",
            torch.tensor([[0, 0, 5, 6, 7, 8], [5, 6, 7, 8, 9, 4]]),
            3,
            2,
        ),
        ("a gap of pads as wide as the window, window 2", torch.tensor([[5, 0, 0, 6, 7, 8]]), 2, 2),
        ("window 10, longer than the sequence", torch.tensor([[5, 0, 6, 7]]), 10, 2),
        (
            "three sentences, two heads, window 2",
            torch.tensor([[5, 6, 7, 0, 0], [0, 5, 6, 7, 8], [5, 0, 6, 0, 7]]),
            2,
            2,
        ),
    ]
    failures, passed = [], 0
    for name, tokens, window, heads in cases:
        batch, n = tokens.shape
        scores = torch.randn(batch, heads, n, n, generator=generator)
        allowed = _window_mask(tokens, pad, window)[:, None]  # (B, 1, q, k)
        real_keys = (tokens != pad)[:, None, None, :]
        offset = torch.arange(n)[:, None] - torch.arange(n)[None, :]
        mistakes = {
            "the window holds window + 1 keys: query i sees keys i - window + 1 .. i": (
                masked_softmax(scores, mask=_window_mask(tokens, pad, window + 1)[:, None])
            ),
            "not causal: the window ends at the query (keys j <= i), it is not centred on it": (
                masked_softmax(scores, mask=(offset.abs() < window) & real_keys)
            ),
            "pad keys are not masked": masked_softmax(
                scores, mask=(offset >= 0) & (offset < window)
            ),
            "masks the pad queries' rows instead of the pad keys' columns": masked_softmax(
                scores, mask=(offset >= 0) & (offset < window) & (tokens != pad)[:, None, :, None]
            ),
            "a large negative fill gives a row with no allowed key the same weight on every "
            "key, future ones included: such a row must be all zeros": torch.softmax(
                scores.masked_fill(~allowed, -1e9), -1
            ),
            "True where attending is NOT allowed: that is torch's convention, not ours": (
                masked_softmax(scores, mask=~allowed)
            ),
        }
        if batch == heads > 1:  # the one shape where a (B, q, k) mask broadcasts silently
            mistakes[_NO_HEAD_AXIS] = masked_softmax(scores, mask=_window_mask(tokens, pad, window))
        empty = not allowed.any(-1).all()
        answers = {}

        def learner(s, t, window=window, answers=answers, batch=batch, heads=heads, n=n):
            try:
                answers["got"] = learner_weights(s, t, pad, window)
            except (RuntimeError, ValueError) as error:
                if _batch_met_heads(error, batch, heads, n):
                    raise Refused(
                        f"your function raised {type(error).__name__}: {error} ({_NO_HEAD_AXIS})"
                    ) from error
                raise
            return answers["got"]

        def reference(s, t, window=window, answers=answers):
            """The weights of the exercise; or, when the answer masks the pad queries' rows as
            well (right too: those rows are never used), the weights of that variant."""
            keys_only = _window_mask(t, pad, window)[:, None]  # (B, 1, q, k)
            rows_too = masked_softmax(s, mask=keys_only & (t != pad)[:, None, :, None])
            got = answers.get("got")
            if (
                isinstance(got, torch.Tensor)
                and got.shape == rows_too.shape
                and got.is_floating_point()
                and torch.allclose(got.detach().double(), rows_too.detach().double(), atol=1e-6)
            ):
                return rows_too
            return masked_softmax(s, mask=keys_only)

        passed += run_case(
            name,
            learner,
            (scores, tokens),
            reference,
            failures,
            atol=1e-6,
            hint="query i attends to the non-pad keys j with i - window < j <= i"
            + ("; a query with no such key gets a row of zeros (not NaN)" if empty else ""),
            mistakes=mistakes,
            forbidden=_MASK_BUILDERS,
            names=("scores", "tokens"),
        )
    return report(failures, passed)


class _OneStepAtATime:
    """The layer handed to the learner: it refuses any call that is not one decoding step."""

    def __init__(self, layer: MultiHeadAttention):
        self._layer = layer
        self.num_heads, self.d_model = layer.num_heads, layer.d_model

    def __call__(self, queries, keys, values, valid_lens=None, mask=None, cache=None):
        if isinstance(queries, torch.Tensor) and queries.dim() == 3 and queries.shape[1] != 1:
            raise Refused(
                f"calls the layer on {queries.shape[1]} positions at once: decode one position "
                f"per call, queries of shape (B, 1, d_model)"
            )
        if cache is None:
            raise Refused(
                "calls the layer without a cache: create one KeyValueCache before the loop and "
                "pass it to every step (cache=cache)"
            )
        return self._layer(queries, keys, values, valid_lens=valid_lens, mask=mask, cache=cache)

    def __getattr__(self, name):
        raise Refused(
            f"uses layer.{name}: call the layer itself, one position per call, with a cache"
        )


@exercise_checker
def check_cached_decoding_with_pads(learner_decode: Callable) -> bool:
    """learner_decode(layer, sequence, tokens, pad_id) -> (B, n, d_model): the causal
    self-attention layer run one position per call with a KeyValueCache, each step masking the
    pad keys among positions 0..t; it must equal one pass with causal_padding_mask."""
    pad = 0
    generator = torch.Generator().manual_seed(10)
    with torch.random.fork_rng():
        torch.manual_seed(10)
        layer = MultiHeadAttention(8, num_heads=2).eval()
    cases = {
        "left padding, a batch of two": torch.tensor([[0, 0, 5, 6, 7], [5, 6, 7, 8, 9]]),
        "a pad in the middle": torch.tensor([[5, 0, 6, 7, 0, 8]]),
        "right padding": torch.tensor([[5, 6, 7, 0], [5, 6, 0, 0]]),
    }
    failures, passed = [], 0
    for name, tokens in cases.items():
        batch, n = tokens.shape
        sequence = torch.randn(batch, n, 8, generator=generator)
        with torch.no_grad():
            mistakes = {
                "the pad keys are read: give each step t a mask of shape (B, 1, t + 1), True at "
                "the non-pad tokens 0..t": layer(sequence, sequence, sequence, mask=causal_mask(n)),
                "masks the pad queries instead of the pad keys: step t's mask covers every key "
                "so far, (B, 1, t + 1)": layer(
                    sequence,
                    sequence,
                    sequence,
                    mask=causal_mask(n) & (tokens != pad)[:, :, None],
                ),
            }
        passed += run_case(
            name,
            lambda x, t: learner_decode(_OneStepAtATime(layer), x, t, pad),
            (sequence, tokens),
            lambda x, t: layer(x, x, x, mask=causal_padding_mask(t, pad)),
            failures,
            atol=1e-5,
            hint="step t feeds position t alone, with the cache, and hides the pad keys among 0..t",
            mistakes=mistakes,
            names=("sequence", "tokens"),
        )
    return report(failures, passed)
