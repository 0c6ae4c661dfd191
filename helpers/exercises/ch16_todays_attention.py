"""Chapter 16's exercises: the attention inside today's open models.

1. check_softmax_with_sink: softmax over the keys with one more logit per head, the sink, in
   each row's denominator: it takes weight and brings no value (gpt-oss's attention sink).
2. check_absorbed_scores: multi-head latent attention's content scores in the absorbed form:
   W_up_key folded into the query, which is scored against the cached latents themselves, so
   that no key is made for any cached position.
3. check_ring_attention: one decoding step of a sliding-window cache held in a ring buffer:
   the new key and value written in place into slot position % window, then the query
   attending to the slots filled so far.

What every answer must do besides its values (the framework checks it, each docstring below
states it): each call returns within ANSWER_TIME_LIMIT_SECONDS, leaves torch's global settings
(grad mode, default dtype, random generator, anomaly detection, deterministic-algorithms
setting, thread count and module hooks) as they were, leaves its inputs as they came (no
in-place operation on them, their requires_grad as it came; the rings of exercise 3 are the
one exception: they are written in place) and does not call the copy of the exercise's
function in helpers.todays_attention.
"""

import math
import weakref
from collections.abc import Callable

import torch
from torch.utils._pytree import tree_leaves

from helpers import todays_attention
from helpers.attention import masked_softmax
from helpers.exercises.framework import (
    OperationsWatcher,
    Refused,
    TimedAnswers,
    advise,
    exercise_checker,
    forbidden_functions,
    named_together,
    report,
    run_case,
    tensor_hooks,
    told_apart,
    wrong_only,
)
from helpers.todays_attention import softmax_with_sink, window_mask

__all__ = ["check_absorbed_scores", "check_ring_attention", "check_softmax_with_sink"]

# The references, held under names of their own: an answer that rebinds this module's
# softmax_with_sink changes what it calls, not what it is checked against
SOFTMAX_WITH_SINK = softmax_with_sink
WINDOW_MASK = window_mask
MASKED_SOFTMAX = masked_softmax


# 1. Softmax with a sink


def sink_cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, scores (B, heads, q, k) float64, sink_logits (heads,) float64) for every case."""
    generator = torch.Generator().manual_seed(160)

    def case(name, batch, heads, q, k, sinks, offset=0.0, scale=2.0):
        scores = offset + scale * torch.randn(
            batch, heads, q, k, generator=generator, dtype=torch.float64
        )
        return name, scores, torch.tensor(sinks, dtype=torch.float64)

    return [
        case(
            "(B=2, 3 heads, 4 queries, 5 keys), sink logits 1.5, -0.5, 3",
            *(2, 3, 4, 5),
            [1.5, -0.5, 3.0],
        ),
        case(
            "(B=2, 4 heads, 4 queries, 6 keys): as many heads as queries",
            *(2, 4, 4, 6),
            [0.5, 2.0, -1.0, 1.0],
        ),
        case(
            "(B=1, 3 heads, 2 queries, 3 keys): as many heads as keys",
            *(1, 3, 2, 3),
            [2.5, 0.0, -1.5],
        ),
        case(
            "(B=3, 2 heads, 1 query, 7 keys): one query, as when decoding",
            *(3, 2, 1, 7),
            [1.0, 3.5],
        ),
        case(
            "(B=2, 3 heads, 4 queries, 5 keys), scores about 1,000 (1000 + 3 * randn) and sink "
            "logits 996, 1000, 1004: exp overflows float64 (e^709.8 is its largest)",
            *(2, 3, 4, 5),
            [996.0, 1000.0, 1004.0],
            offset=1000.0,
            scale=3.0,
        ),
        case(
            "(B=2, 3 heads, 2 queries, 4 keys), sink logits 720, 1.5, -2: exp(720) overflows "
            "float64, and head 0 gives nearly all its weight to the sink",
            *(2, 3, 2, 4),
            [720.0, 1.5, -2.0],
        ),
        case(
            "(B=2, 2 heads, 3 queries, 5 keys), sink logits -inf and 0.3: head 0 has no sink "
            "(a logit of -inf), so its weights are the plain softmax",
            *(2, 2, 3, 5),
            [float("-inf"), 0.3],
        ),
    ]


def _with_sink_column(scores: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """softmax over the scores joined with one more column, sinks broadcast to (B, h, q, 1);
    the joined column's weight is left out."""
    column = sinks.expand(*scores.shape[:-1], 1)
    return torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]


SINK_HINT = (
    "exp(scores) / (the row's sum of exp(scores) + exp(the head's sink logit)), each exp shifted "
    "by the row's largest logit, the sink's included"
)
OVERFLOW = (
    "exp overflows: a score or sink logit about 1,000 gives exp = inf in float64 (e^709.8 is "
    "its largest), and inf / inf is NaN; subtract each row's largest logit, the sink's "
    "included, before exp (or join the sink's column to the scores and take torch.softmax, "
    "which does)"
)
SINK_LINED_UP = (
    "the sink logits are lined up with the {axis} (axis {index}), not the heads: {what} (it runs "
    "only because heads = {letter} here); sink_logits is (heads,), one per head, on the scores' "
    "axis 1: give it the shape (heads, 1, 1) (sink_logits[:, None, None]) before it meets them"
)


def _sink_mistakes(scores: torch.Tensor, sink_logits: torch.Tensor) -> dict:
    x, sinks = scores.detach(), sink_logits.detach()
    _, heads, queries, keys = x.shape
    per_head = sinks[:, None, None]  # (heads, 1, 1)
    shifted = torch.exp(x - x.amax(-1, keepdim=True))  # (B, heads, q, k)
    unshifted = torch.exp(x)
    mistakes = {
        "the plain softmax: the sink is left out (or its column dropped and the rest "
        "renormalised, or its logit added to every score, which shifts nothing); exp(sink "
        "logit) belongs in each row's denominator, so that the row sums to less than 1": (
            x.softmax(-1)
        ),
        "the sink's column is kept: the sink takes weight but brings no value, so return the k "
        "key columns only (drop the sink's, [..., :-1])": torch.cat(
            [x, per_head.expand(*x.shape[:-1], 1)], -1
        ).softmax(-1),
        "the sink's column was put first (torch.cat([sink, scores], -1)) and the last column "
        "dropped: the weights came back shifted by one key, the sink's in front; drop the "
        "sink's own column": torch.cat([per_head.expand(*x.shape[:-1], 1), x], -1).softmax(-1)[
            ..., :-1
        ],
        "exp(sink logit) is added to the denominator without the shift the scores had: "
        "subtract the same row maximum m from the sink logit (exp(sink - m)), or the sink's "
        "share is off by a factor e^m": shifted / (shifted.sum(-1, keepdim=True) + per_head.exp()),
        "the sink logit itself is added to the denominator: the sink's term is exp(sink "
        "logit), shifted as the scores were, exp(sink - m)": shifted
        / (shifted.sum(-1, keepdim=True) + per_head),
    }
    added = (x + per_head).softmax(-1)
    if added.isnan().any():  # elsewhere the plain softmax, named above
        mistakes[
            "the sink logit is added to every score (softmax(scores + sink)): a sink of -inf "
            "then makes every score -inf, and the softmax NaN; the sink is one more term, "
            "exp(sink), in each row's denominator"
        ] = added
    naive = unshifted / (unshifted.sum(-1, keepdim=True) + per_head.exp())
    if not naive.isfinite().all():
        mistakes[OVERFLOW] = naive
        mistakes[
            f"{OVERFLOW}; the NaN then replaced by 0 (nan_to_num, torch.where) is no weight either"
        ] = naive.nan_to_num(0.0)
    if heads == queries:
        mistakes[
            SINK_LINED_UP.format(
                axis="queries", index=2, what="query i took head i's sink", letter="q"
            )
        ] = _with_sink_column(x, sinks[None, None, :, None])
    if heads == keys:
        mistakes[
            SINK_LINED_UP.format(
                axis="keys", index=3, what="key j's weight took head j's sink", letter="k"
            )
        ] = shifted / (shifted.sum(-1, keepdim=True) + torch.exp(sinks - x.amax(-1, keepdim=True)))
    return named_together(mistakes)


@exercise_checker
def check_softmax_with_sink(learner_softmax: Callable) -> bool:
    """learner_softmax(scores, sink_logits) -> (B, heads, q, k) float64: scores (B, heads, q,
    k) float64, sink_logits (heads,) float64, one per head. Softmax over the last axis with one
    more logit per head in each row's denominator, the sink: weight[b, h, i, j] =
    exp(scores[b, h, i, j]) / (sum over j' of exp(scores[b, h, i, j']) +
    exp(sink_logits[h])), so each row sums to less than 1 (the sink's own weight is not
    returned). The cases: (B=2, 3 heads, 4 queries, 5 keys); (B=2, 4 heads, 4 queries, 6
    keys), as many heads as queries; (B=1, 3 heads, 2 queries, 3 keys), as many heads as
    keys; (B=3, 2 heads, 1 query, 7 keys); scores about 1,000 with sink logits 996, 1000 and
    1004 (exp overflows float64); sink logits 720, 1.5 and -2 (exp(720) overflows); sink
    logits -inf and 0.3 (head 0 has no sink: its weights are the plain softmax). Never NaN;
    values and gradients to both inputs as helpers.todays_attention.softmax_with_sink gives
    them. The inputs are left as they were (no in-place operation on them, even one that
    changes no value, their requires_grad as it came, no hook left on them, and no backward
    pass inside). Without calling helpers.todays_attention.softmax_with_sink (refused by
    name); torch.softmax, logsumexp and torch.cat are yours to use. Each call must return
    within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode, default dtype, random
    generator, anomaly detection, deterministic-algorithms setting, thread count and module
    hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_softmax)
    for name, scores, sink_logits in sink_cases():
        right = SOFTMAX_WITH_SINK(scores, sink_logits)
        before = len(failures)
        passed += run_case(
            name,
            answers,
            (scores, sink_logits),
            SOFTMAX_WITH_SINK,
            failures,
            atol=1e-10,
            hint=SINK_HINT,
            mistakes=wrong_only(_sink_mistakes(scores, sink_logits), right),
            forbidden=forbidden_functions(
                todays_attention, "softmax_with_sink", "_softmax_with_sink"
            ),
            names=("scores", "sink_logits"),
        )
        if len(failures) == before:
            continue
        _advise_on_the_sink(failures, name, scores)
    return report(failures, passed)


def _advise_on_the_sink(failures: list, name: str, scores: torch.Tensor) -> None:
    heads = scores.shape[1]
    broadcast = ("must match the size of tensor", "Sizes of tensors must match", "expand")
    if any(words in failures[-1] for words in broadcast):
        advise(
            failures,
            name,
            "your function raised",
            "",
            f"sink_logits is (heads,) = ({heads},), one logit per head: as it comes it lines "
            f"up with the scores' last axis; give it the shape (heads, 1, 1) "
            f"(sink_logits[:, None, None]), and expand it to (B, heads, q, 1) to join it to "
            f"the scores with torch.cat",
        )
    advise(
        failures,
        name,
        "the values are right but the gradient",
        "is nan",
        "exp of a logit near 720 or 1,000 is inf in float64 even where the weight it gives "
        "rounds to 0: subtract each row's largest logit, the sink's included, before exp",
    )


# 2. Multi-head latent attention's scores, absorbed


def absorbed_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(name, q_content (B, heads, n, d_head), latents (B, N, d_latent), W_up_key (heads *
    d_head, d_latent)), all float64, for every case. Within a case the sizes differ from one
    another (but B = heads in the last), so that a key, (N, d_head), is told from any other
    tensor by its shape and its number of entries."""
    generator = torch.Generator().manual_seed(161)

    def case(name, batch, heads, n, cached, d_head, d_latent):
        def draw(*shape):
            return torch.randn(*shape, generator=generator, dtype=torch.float64)

        weight = draw(heads * d_head, d_latent) / math.sqrt(d_latent)  # as nn.Linear stores it
        return name, draw(batch, heads, n, d_head), draw(batch, cached, d_latent), weight

    return [
        case("B=6, 2 heads, n=4 queries, N=7 latents, d_head=5, d_latent=3", 6, 2, 4, 7, 5, 3),
        case(
            "B=1, 3 heads, n=2, N=9, d_head=4, d_latent=6 (the latent wider than a head, as in "
            "DeepSeek-V2: 512 against 128)",
            *(1, 3, 2, 9, 4, 6),
        ),
        case("B=3, 4 heads, n=1 (one new position), N=11, d_head=5, d_latent=2", 3, 4, 1, 11, 5, 2),
        case("B=2, 2 heads (B = heads), n=3, N=5, d_head=4, d_latent=7", 2, 2, 3, 5, 4, 7),
        case(
            "the sizes of the first case again, with new values (an answer kept from an earlier "
            "call shows)",
            *(6, 2, 4, 7, 5, 3),
        ),
    ]


def _absorbed(q_content, latents, W_up_key, up_key=None) -> torch.Tensor:
    """The checker's own absorbed scores; up_key (heads, d_head, d_latent) in place of
    W_up_key's (for the mistakes)."""
    heads, d_head = q_content.shape[1], q_content.shape[-1]
    up_key = W_up_key.view(heads, d_head, -1) if up_key is None else up_key
    return (q_content @ up_key) @ latents[:, None].mT  # (B, heads, n, N)


def _made_keys(q_content, latents, W_up_key) -> torch.Tensor:
    """The same scores, the plain way: a key per cached position, (B, heads, N, d_head)."""
    batch, heads, _, d_head = q_content.shape
    keys = (latents @ W_up_key.T).view(batch, -1, heads, d_head).transpose(1, 2)
    return q_content @ keys.mT


def _absorbed_mistakes(q_content, latents, W_up_key) -> dict:
    q, c, weight = q_content.detach(), latents.detach(), W_up_key.detach()
    batch, heads, _, d_head = q.shape
    d_latent = c.shape[-1]
    right = _absorbed(q, c, weight)
    layout = (
        "nn.Linear(d_latent, heads * d_head) stores its weight out by in, (heads * d_head, "
        "d_latent), head h's rows h * d_head:(h + 1) * d_head: W_up_key.view(heads, d_head, "
        "d_latent)[h] is head h's W_up_key_h, and q_content @ it folds it into the query"
    )
    mistakes = {
        f"the heads are split the wrong way, W_up_key.view(d_head, heads, d_latent): {layout}": (
            _absorbed(q, c, weight, weight.view(d_head, heads, d_latent).transpose(0, 1))
        ),
        f"W_up_key is read as (heads, d_latent, d_head), then transposed: {layout}": _absorbed(
            q, c, weight, weight.reshape(heads, d_latent, d_head).mT
        ),
        f"W_up_key is read as (d_latent, heads * d_head), the maths' c W_up_key: {layout}": (
            _absorbed(q, c, weight, weight.reshape(d_latent, heads, d_head).permute(1, 2, 0))
        ),
        "the scores are divided by sqrt(d_head): this exercise asks for the content scores "
        "before any scale (the layer divides their sum with the rotated part's scores by "
        "sqrt(d_head + d_rope) later)": right / math.sqrt(d_head),
        "the scores are divided by sqrt(d_latent): this exercise asks for the content scores "
        "before any scale": right / math.sqrt(d_latent),
        "the heads are summed: each head scores on its own, (B, heads, n, N)": right.sum(1),
        "the heads are averaged: each head scores on its own, (B, heads, n, N)": right.mean(1),
        "the heads are summed, their axis kept: each head scores on its own, (B, heads, n, "
        "N)": right.sum(1, keepdim=True),
        "the scores are (B, heads, N, n): the new queries are the rows, the cached latents the "
        "columns, (B, heads, n, N)": right.mT,
    }
    if batch == heads:
        mistakes[
            "the latents are given no heads axis: (B, heads, n, d_latent) @ latents.mT (B, "
            "d_latent, N) lines the latents' batch axis up with the heads (it runs only "
            "because B = heads here), so head h read example h's latents; latents[:, None] "
            "(B, 1, N, d_latent) broadcasts over the heads"
        ] = torch.matmul(q @ weight.view(heads, d_head, d_latent), c.mT)
    return named_together(mistakes)


class _KeysMade(OperationsWatcher):
    """Records the torch operations (aten, however they were called) inside it that return a
    tensor shaped like the keys: its last two axes larger than 1 are (N, d_head), (N, heads *
    d_head) or their transpose, or it holds B * heads * N * d_head entries; or, made from the
    latents, its last axis larger than 1 is d_head or heads * d_head (keys made one cached
    position at a time)."""

    def __init__(self, latents: torch.Tensor, heads: int, d_head: int):
        super().__init__()
        batch, cached, _ = latents.shape
        endings = {(cached, d_head), (cached, heads * d_head)}
        self.endings = endings | {(width, length) for length, width in endings}
        self.count = batch * heads * cached * d_head
        self.widths = {d_head, heads * d_head}
        self.from_latents = {id(latents): weakref.ref(latents)}  # the tensors made from them
        self.seen: list[tuple[str, tuple]] = []  # (the operation, the shape it returned)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        made_from_latents = any(self._of_latents(x) for x in tree_leaves((args, kwargs)))
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            sizes = tuple(size for size in tensor.shape if size > 1)
            if made_from_latents:
                self.from_latents[id(tensor)] = weakref.ref(tensor)
            if (
                tensor.numel() == self.count
                or sizes[-2:] in self.endings
                or (made_from_latents and sizes[-1:] and sizes[-1] in self.widths)
            ):
                self.seen.append((func.overloadpacket.__name__, tuple(tensor.shape)))
        return out

    def _of_latents(self, x: object) -> bool:
        held = self.from_latents.get(id(x))
        return held is not None and held() is x


KEYS_MADE = (
    "makes the keys: inside your function torch made, from the latents, a tensor of shape "
    "{shape} (its internal operation aten.{operation}) that holds keys of cached positions "
    "(d_head = {d_head} numbers per head): the absorbed form makes no key at all; fold W_up_key "
    "into the query instead, q_content @ W_up_key.view(heads, d_head, d_latent) (B, heads, n, "
    "d_latent), and score that against the latents themselves (a single einsum of all three "
    "contracts them left to right: put q_content and W_up_key first)"
)


def _without_keys(answers: Callable, heads: int, d_head: int) -> Callable:
    """The learner's function, refused if it makes a key for any cached position."""

    def absorbed_scores(q_content, latents, W_up_key):
        with _KeysMade(latents, heads, d_head) as made:
            got = answers(q_content, latents, W_up_key)
        if made.seen:
            operation, shape = made.seen[0]
            raise Refused(KEYS_MADE.format(shape=shape, operation=operation, d_head=d_head))
        return got

    return absorbed_scores


@exercise_checker
def check_absorbed_scores(learner_scores: Callable) -> bool:
    """learner_scores(q_content, latents, W_up_key) -> (B, heads, n, N) float64: q_content (B,
    heads, n, d_head), the content part of the new positions' queries; latents (B, N, d_latent),
    the cached latents; W_up_key (heads * d_head, d_latent), the weight of multi-head latent
    attention's nn.Linear(d_latent, heads * d_head), head h's rows h * d_head:(h + 1) * d_head;
    all float64. The content scores, score[b, h, i, j] = q_content[b, h, i] . (W_up_key_h @
    latents[b, j]), WITHOUT the 1/sqrt scale, computed in the absorbed form: W_up_key_h folded
    into the query (q_content @ W_up_key_h, (B, heads, n, d_latent)), scored against the latents
    themselves. Making the keys is refused, however it is spelled: the checker watches torch's
    operations and refuses any tensor whose last two axes larger than 1 are (N, d_head), (N,
    heads * d_head) or their transpose, or that holds B * heads * N * d_head entries, or that is
    made from the latents with a last axis of d_head or heads * d_head (keys made one cached
    position at a time). The cases (B, heads, n, N, d_head, d_latent): (6, 2, 4, 7, 5, 3), (1, 3,
    2, 9, 4, 6), (3, 4, 1, 11, 5, 2), (2, 2, 3, 5, 4, 7) and the first again with new
    values. Gradients to all three inputs are
    checked. The inputs are left as they were (no in-place operation on them, even one that
    changes no value, their requires_grad as it came, no hook left on them, and no backward pass
    inside). Without calling helpers.todays_attention.MultiHeadLatentAttention (refused by name).
    Each call must return within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode,
    default dtype, random generator, anomaly detection, deterministic-algorithms setting, thread
    count and module hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_scores)
    for name, q_content, latents, W_up_key in absorbed_cases():
        _, heads, _, d_head = q_content.shape
        right = _absorbed(q_content, latents, W_up_key)
        before = len(failures)
        passed += run_case(
            name,
            _without_keys(answers, heads, d_head),
            (q_content, latents, W_up_key),
            _absorbed,
            failures,
            atol=1e-10,
            hint="score[b, h, i, j] = (q_content[b, h, i] @ W_up_key_h) . latents[b, j], "
            "W_up_key_h = W_up_key.view(heads, d_head, d_latent)[h], no scale",
            mistakes=wrong_only(_absorbed_mistakes(q_content, latents, W_up_key), right),
            forbidden=forbidden_functions(
                todays_attention,
                "MultiHeadLatentAttention.forward",
                "MultiHeadLatentAttention._forward",
            ),
            names=("q_content", "latents", "W_up_key"),
        )
        if len(failures) == before:
            continue
        if any(w in failures[-1] for w in ("cannot be multiplied", "must match", "shape '[")):
            advise(
                failures,
                name,
                "your function raised",
                "",
                f"here q_content is {tuple(q_content.shape)}, latents {tuple(latents.shape)} "
                f"and W_up_key {tuple(W_up_key.shape)}: W_up_key.view(heads, d_head, d_latent) "
                f"is (heads, d_head, d_latent), q_content @ it (B, heads, n, d_latent), and "
                f"latents[:, None].mT (B, 1, d_latent, N)",
            )
        advise(
            failures,
            name,
            "your function raised",
            "view size is not compatible",
            "W_up_key comes as nn.Linear stores it, (heads * d_head, d_latent), head h's rows "
            "h * d_head:(h + 1) * d_head: view it as (heads, d_head, d_latent) as it is, not "
            "transposed (W_up_key.T is a view whose memory runs the other way)",
        )
    return report(failures, passed)


# 3. A sliding window held in a ring buffer


def ring_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, torch.Tensor, int, float, int]]:
    """(name, queries, keys, values (B, heads, n, d) float64, window, start: what the rings hold
    before anything is written, first: the first position fed) for every case: the checker feeds
    positions first, first + 1, ..., n - 1, the rings holding the positions before first (written
    by an earlier caller, never shown to the answer but in the rings)."""
    generator = torch.Generator().manual_seed(162)

    def case(name, batch, heads, n, d, window, start=0.0, first=0):
        queries, keys, values = (
            torch.randn(batch, heads, n, d, generator=generator, dtype=torch.float64)
            for _ in range(3)
        )
        return name, queries, keys, values, window, start, first

    return [
        case("window 3, 8 positions (B=2, 2 heads, d=4), rings starting at zeros", 2, 2, 8, 4, 3),
        case(
            "window 4, 10 positions (B=1, 3 heads, d=8), rings starting at NaN (a buffer made by "
            "torch.empty holds whatever its memory held): a slot read before it is written shows",
            *(1, 3, 10, 8, 4),
            start=float("nan"),
        ),
        case(
            "window 1, 5 positions (B=2, 2 heads, d=3): each query reads itself alone",
            *(2, 2, 5, 3, 1),
        ),
        case(
            "window 6, 4 positions (B=2, 1 head, d=4): a window longer than the sequence, the "
            "ring never fills",
            *(2, 1, 4, 4, 6),
        ),
        case(
            "window 5, 12 positions (B=2, 4 heads, d=6): the ring wraps around twice",
            *(2, 4, 12, 6, 5),
        ),
        case(
            "window 4, positions 6 to 11 (B=2, 2 heads, d=5): the rings come holding positions "
            "2 to 5, written before your function ran: read the earlier keys from the rings",
            *(2, 2, 12, 5, 4),
            first=6,
        ),
    ]


def _windowed(queries, keys, values, position: int, window: int) -> torch.Tensor:
    """Query `position` (B, heads, 1, d) attending to the keys (B, heads, position + 1, d) of
    the full sequence that lie in its window: causal attention limited to the last `window`
    positions, softmax(q.k / sqrt(d))."""
    allowed = WINDOW_MASK(torch.tensor([position]), torch.arange(keys.shape[2]), window)
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])  # (B, heads, 1, position + 1)
    return MASKED_SOFTMAX(scores, mask=allowed) @ values


def _over_the_sequence(queries, keys, values, allowed: torch.Tensor) -> torch.Tensor:
    """Every position's query (B, heads, n, d) attending to the keys `allowed` (n, n) it."""
    scores = queries @ keys.mT / math.sqrt(queries.shape[-1])  # (B, heads, n, n)
    return MASKED_SOFTMAX(scores, mask=allowed) @ values


def _ring_after(rings: tuple, key: torch.Tensor, value: torch.Tensor, position: int) -> tuple:
    """The rings once the step has written key and value (B, heads, 1, d) into their slot."""
    slot = torch.tensor([position % rings[0].shape[2]])
    return rings[0].index_copy(2, slot, key), rings[1].index_copy(2, slot, value)


def _attended(query, ring_keys, ring_values) -> torch.Tensor:
    """The query attending to every slot of the rings given, all allowed."""
    scores = query @ ring_keys.mT / math.sqrt(query.shape[-1])
    return scores.softmax(-1) @ ring_values


UNWRITTEN = (
    "reads slots not written yet: until the ring is full (position < window - 1) only slots "
    "0..position hold keys, the others what the buffer started with (zeros take weight as keys "
    "that score 0; a buffer from torch.empty may hold NaN, and then even a weight of 0 gives "
    "0 * NaN = NaN): attend to ring[:, :, :position + 1] until the ring is full"
)


def _sequence_mistakes(queries, keys, values, window: int) -> dict:
    """{diagnosis: what the mistake returns at every position (B, heads, n, d)}: the typical
    mistakes that do not depend on what the rings hold."""
    positions = torch.arange(queries.shape[2])
    allowed = WINDOW_MASK(positions, positions, window)  # (n, n)
    wider = WINDOW_MASK(positions, positions, window + 1)
    before_the_write = wider & ~torch.eye(len(positions), dtype=torch.bool)  # t-window..t-1
    d = queries.shape[-1]
    return {
        "the scores are not divided by sqrt(d): softmax(q.k / sqrt(d)), d the width of the "
        "queries and keys": _over_the_sequence(queries * math.sqrt(d), keys, values, allowed),
        "attends to window + 1 positions: the key of position - window, the one this step "
        "overwrites, is read too (the new key joined to the ring before it is written); write "
        "first, then attend to the window slots": _over_the_sequence(queries, keys, values, wider),
        "the new position is not read: the query attends to the ring as it was before the write "
        "(positions - window .. - 1); write the key and value first, then attend, so that the "
        "query reads itself": _over_the_sequence(queries, keys, values, before_the_write),
    }


def _ring_mistakes(sequence_mistakes: dict, query, after: tuple, position: int) -> dict:
    """The step's typical mistakes: those of the sequence at this position, and, before the
    ring is full, reading its slots not written yet; after: the rings once the step wrote."""
    mistakes = {
        diagnosis: answers[:, :, position : position + 1]
        for diagnosis, answers in sequence_mistakes.items()
    }
    if position + 1 < after[0].shape[2]:
        mistakes[UNWRITTEN] = _attended(query, *after)
    return named_together(
        {
            diagnosis: answer
            for diagnosis, answer in mistakes.items()
            if diagnosis == UNWRITTEN or not answer.isnan().any()  # a NaN is named by UNWRITTEN
        }
    )


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def _ring_problem(which: str, ring, expected, before, position: int) -> str | None:
    """What is wrong with the ring `which` ("keys" or "values") after the step; None if it
    holds what it should: the step's new entry in slot position % window, every other slot
    filled so far as before (the slots not filled yet are the answer's to leave or clear)."""
    name = f"ring_{which}"
    window = expected.shape[2]
    slot, filled = position % window, min(position + 1, window)
    if not isinstance(ring, torch.Tensor) or ring.shape != expected.shape:
        shape = tuple(ring.shape) if isinstance(ring, torch.Tensor) else type(ring).__name__
        return (
            f"`{name}` is {shape} after the call, where it came as {tuple(expected.shape)}: "
            f"write the new entry into its slot, in place, and leave its shape as it is"
        )
    if ring.dtype != expected.dtype:
        return f"`{name}` is {ring.dtype} after the call, where it came as {expected.dtype}"
    ring = ring.detach()
    if _same(ring[:, :, :filled], expected[:, :, :filled]):
        return None
    if _same(ring, before):
        return (
            f"`{name}` holds after the call what it held before: the {which[:-1]} of position "
            f"{position} was not written into it; write it into the caller's ring in place, "
            f"{name}[:, :, position % window] = {which[:-1]}[:, :, 0] (a copy, torch.cat, or "
            f"index_copy or scatter without the underscore makes a new tensor and leaves the "
            f"caller's ring as it was): the next step reads the ring, not your copy"
        )
    new = expected[:, :, slot]
    elsewhere = [s for s in range(window) if s != slot and _same(ring[:, :, s], new)]
    if elsewhere:
        return (
            f"the {which[:-1]} of position {position} went into slot {elsewhere[0]} of `{name}`, "
            f"where it belongs in slot position % window = {slot} (window {window}), written "
            f"in place"
        )
    ring, expected = ring[:, :, :filled], expected[:, :, :filled]
    wrong = ~((ring == expected) | (ring.isnan() & expected.isnan()))
    b, h, s, i = torch.nonzero(wrong)[0].tolist()
    mine, theirs = told_apart(ring[b, h, s, i].item(), expected[b, h, s, i].item())
    what = (
        f"the {which[:-1]} of position {position}, written in place this step"
        if s == slot
        else "what it held before the step: a step writes its own slot, position % window, in "
        "place, and no other"
    )
    return f"`{name}`[{b}, {h}, {s}, {i}] is {mine} after the call, expected {theirs}, {what}"


def _refuse_a_ring_switched(rings: tuple, hooks: list) -> None:
    """Refuse a step that switched requires_grad on for a ring (a leaf that records gradients:
    writing a key into the ring as it came makes it carry the key's graph instead), or left a
    hook on one."""
    for which, ring, before in zip(("ring_keys", "ring_values"), rings, hooks, strict=True):
        if ring.is_leaf and ring.requires_grad:
            ring.requires_grad_(False)
            raise Refused(
                f"switches requires_grad on for its input `{which}` (requires_grad_() on the "
                f"caller's ring): a leaf that records gradients cannot be written in place; "
                f"write key and value into the ring as it came, and the gradient reaches them "
                f"through it"
            )
        if tensor_hooks(ring) != before:
            raise Refused(
                f"leaves a hook on its input `{which}` (register_hook or retain_grad() on the "
                f"caller's ring): it would run, or keep a gradient, in every later backward "
                f"pass of the caller's"
            )


class _RingStep:
    """One decoding step of the learner's function at `position`: called with fresh copies of
    the rings as the step before left them (`rings`); keeps the rings the first call of the
    step was given (`written`), to be read once the step's output is judged (the framework
    calls the function again on other copies of its inputs)."""

    def __init__(self, learner: Callable):
        self.learner = learner
        self.rings: tuple = ()
        self.position = 0
        self.written: tuple | None = None
        self.answers = TimedAnswers(self.step)

    def step(self, query, key, value):
        rings = tuple(ring.clone() for ring in self.rings)
        hooks = [tensor_hooks(ring) for ring in rings]
        if self.written is None:
            self.written = rings
        try:
            got = self.learner(query, key, value, *rings, self.position)
        except Exception:
            _refuse_a_ring_switched(rings, hooks)  # the cause of the error, where it is one
            raise
        _refuse_a_ring_switched(rings, hooks)
        return got

    def __call__(self, query, key, value):
        return self.answers(query, key, value)


RING_HINT = (
    "softmax(q.k / sqrt(d)) over the keys in the ring once the step's key is written: the last "
    "`window` positions up to this one"
)


def _run_sequence(steps: _RingStep, case: tuple, failures: list) -> bool:
    """Feed the case's positions one at a time; stop at the first that fails."""
    name, queries, keys, values, window, start, first = case
    batch, heads, n, d = queries.shape
    rings = tuple(
        torch.full((batch, heads, window, d), start, dtype=queries.dtype) for _ in range(2)
    )
    for position in range(max(0, first - window), first):  # what an earlier caller wrote
        rings[0][:, :, position % window] = keys[:, :, position]
        rings[1][:, :, position % window] = values[:, :, position]
    positions = torch.arange(n)
    right = _over_the_sequence(queries, keys, values, WINDOW_MASK(positions, positions, window))
    sequence_mistakes = _sequence_mistakes(queries, keys, values, window)
    for position in range(first, n):
        step_name = f"{name}; position {position} (slot {position % window})"
        new = (keys[:, :, position : position + 1], values[:, :, position : position + 1])
        expected = _ring_after(rings, *new, position)
        steps.rings, steps.position, steps.written = rings, position, None

        def reference(query, key, value, position=position):
            seen_keys = torch.cat([keys[:, :, :position], key], 2)  # (B, heads, position + 1, d)
            seen_values = torch.cat([values[:, :, :position], value], 2)
            return _windowed(query, seen_keys, seen_values, position, window)

        query = queries[:, :, position : position + 1]
        ok = run_case(
            step_name,
            steps,
            (query, *new),
            reference,
            failures,
            atol=1e-10,
            hint=RING_HINT,
            mistakes=wrong_only(
                _ring_mistakes(sequence_mistakes, query, expected, position),
                right[:, :, position : position + 1],
            ),
            names=("query", "key", "value"),
        )
        if ok or _a_wrong_value(failures[-1], step_name):  # a ring left wrong is the cause
            problem = _rings_problem(steps.written, expected, rings, position)
            if problem is not None:
                if not ok:
                    failures.pop()  # the wrong value, which the ring's mistake explains
                failures.append(f"{step_name}: {problem}")
                ok = False
        if not ok:
            _advise_on_the_ring(failures, step_name, position, window)
            return False
        rings = tuple(ring.detach().clone() for ring in steps.written)  # its unfilled slots too
    return True


def _a_wrong_value(failure: str, name: str) -> bool:
    return failure.removeprefix(f"{name}: ").startswith(("at index (", "NaN at index ("))


def _rings_problem(written: tuple, expected: tuple, before: tuple, position: int) -> str | None:
    """What is wrong with the rings the step was given, keys first; None if both are right."""
    for which, ring, wanted, held in zip(
        ("keys", "values"), written, expected, before, strict=True
    ):
        problem = _ring_problem(which, ring, wanted, held, position)
        if problem is not None:
            return problem
    return None


def _advise_on_the_ring(failures: list, name: str, position: int, window: int) -> None:
    if position == window:
        advise(
            failures,
            name,
            "your function raised",
            "",
            f"position {position} is the first past the ring's {window} slots: the ring wraps "
            f"around, each position's key and value going into slot position % window "
            f"({position % window} here), over the oldest",
        )
    advise(
        failures,
        name,
        "returned a tuple",
        "",
        "return the step's output alone, (B, heads, 1, d): the rings are written in place, "
        "so the caller holds them already",
    )
    if "`key`" in failures[-1] or "`value`" in failures[-1]:
        advise(
            failures,
            name,
            "the values are right but no gradient reaches",
            "",
            "the output reads the new key and value through the ring: write them into it as "
            "they are (not .detach(), .data or under torch.no_grad()), and autograd follows "
            "key -> ring -> output",
        )
    if "expand" in failures[-1]:
        advise(
            failures,
            name,
            "your function raised",
            "",
            "key and value are (B, heads, 1, d) and a slot of the ring, ring[:, :, slot], is (B, "
            "heads, d): write key[:, :, 0] into it (or key into ring[:, :, slot:slot + 1])",
        )
    advise(
        failures,
        name,
        "the gradient cannot be computed",
        "modified by an inplace operation",
        "the attention read the ring, which was then written in place again: autograd needs "
        "what it read; write the step's key and value first, then read the ring, and write "
        "nothing after",
    )


@exercise_checker
def check_ring_attention(learner_step: Callable) -> bool:
    """learner_step(query, key, value, ring_keys, ring_values, position) -> (B, heads, 1, d)
    float64: one decoding step of a sliding-window cache held in a ring buffer. query, key, value
    (B, heads, 1, d) float64, those of the new position `position` (a Python int, from 0);
    ring_keys and ring_values (B, heads, window, d) float64, the preallocated rings. Write key
    and value IN PLACE into slot position % window of the rings (the caller's tensors: the next
    step reads them there), then attend the query to the slots filled so far (slots 0..position
    until the ring is full, all `window` slots once position >= window - 1) with softmax(q.k /
    sqrt(d)), and return the output. The checker feeds whole sequences one position at a time,
    each step's rings holding what the earlier steps wrote, and compares each output with causal
    attention over the full sequence limited to the last `window` positions: window 3 over 8
    positions (B=2, 2 heads, d=4), rings starting at zeros; window 4 over 10 (B=1, 3 heads, d=8),
    rings starting at NaN (a slot read before it is written shows, even at weight 0); window 1
    over 5 (B=2, 2 heads, d=3); window 6 over 4 (B=2, 1 head, d=4; the ring never fills); window
    5 over 12 (B=2, 4 heads, d=6); window 4 over positions 6 to 11 (B=2, 2 heads, d=5), the rings
    coming with positions 2 to 5 already written. After each step the rings must hold exactly the
    last `window` keys and values, each in slot position % window (the slots not written yet are
    yours to leave as they are or to clear; the next step gets the rings as this one left them), and
    the gradients of the output must reach query, key and value (key and value through the ring:
    write them as they are). query, key and value are left as they were (no in-place operation on
    them, even one that changes no value, their requires_grad as it came, no hook left on them,
    and no backward pass inside); the rings are the only tensors written, and their requires_grad
    is not switched. torch's softmax, masked_softmax and scaled_dot_product_attention are yours
    to use. Each call must return within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad
    mode, default dtype, random generator, anomaly detection, deterministic-algorithms setting,
    thread count and module hooks as they were."""
    failures, passed, steps = [], 0, _RingStep(learner_step)
    for case in ring_cases():
        passed += _run_sequence(steps, case, failures)
    return report(failures, passed)
