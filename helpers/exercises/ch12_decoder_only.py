"""Chapter 12's exercises: a decoder-only model's sampling, mask and loss.

1. check_top_p_filter: nucleus (top-p) filtering of a batch of logits, ties at the boundary
   settled either way.
2. check_prefix_lm_mask: the prefix-LM mask from the prompts' lengths: causal, except that the
   prompt reads the whole prompt (and never the answer).
3. check_answer_loss: the cross-entropy over the answer only, <bos> English <sep> French <eos>.
"""

import math
import re
from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers import gpt
from helpers.decoder_only import build_sequences, loss_targets, prefix_lm_mask, training_loss
from helpers.exercises.framework import (
    LOWER_PRECISIONS,
    Refused,
    TimedAnswers,
    exercise_checker,
    lower_precision_mistakes,
    named_together,
    report,
    run_case,
    wrong_only,
)
from helpers.gpt import next_token_probabilities
from helpers.masks import causal_mask
from helpers.translation import EOS_ID, PAD_ID

__all__ = ["check_answer_loss", "check_prefix_lm_mask", "check_top_p_filter"]

NEG_INF = float("-inf")


WRONG_VALUE = re.compile(r"(NaN at index \([^)]*\)|at index \([^)]*\) got \S+, expected \S+)")


def _renamed(failures: list, index: int, name: str, diagnosis: str) -> None:
    """failures[index], a wrong value, with `diagnosis` in place of whatever it named."""
    value = WRONG_VALUE.match(failures[index].removeprefix(f"{name}: "))
    failures[index] = f"{name}: {value.group(1)} ({diagnosis})"


def _a_wrong_value(failure: str, name: str) -> bool:
    return WRONG_VALUE.match(failure.removeprefix(f"{name}: ")) is not None


# 1. Top-p (nucleus) filtering


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """(B, V) bool: the tokens of the nucleus, ties at its boundary broken by torch's sort."""
    if top_p >= 1:
        return torch.ones_like(logits, dtype=torch.bool)
    return next_token_probabilities(logits.detach(), top_p=top_p) > 0


def _readable(answer: object, logits: torch.Tensor) -> bool:
    """The answer is an ordinary floating tensor shaped like the logits."""
    return (
        isinstance(answer, torch.Tensor)
        and answer.layout == torch.strided
        and not (answer.is_meta or answer.is_nested)
        and answer.is_floating_point()
        and answer.shape == logits.shape
    )


def _nucleus_like(answer: object, logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Row by row, the answer's kept tokens if they are a nucleus too: as many tokens as the
    nucleus, every token more likely than its least likely one, and only tokens exactly as
    likely as that one besides (equal logits: which of them stays depends on the sort).
    Otherwise that row of the nucleus."""
    nucleus = _nucleus(logits, top_p)
    if not _readable(answer, logits):
        return nucleus
    kept = answer.detach() > NEG_INF  # NaN counts as dropped
    probabilities = logits.detach().double().softmax(-1)
    least = probabilities.masked_fill(~nucleus, float("inf")).amin(-1, keepdim=True)
    must, may = probabilities > least, probabilities >= least
    also_minimal = (
        (kept.sum(-1) == nucleus.sum(-1)) & (must <= kept).all(-1) & (kept <= may).all(-1)
    )  # (B,)
    return torch.where(also_minimal[:, None], kept, nucleus)


def _kept_by_order(
    scores: torch.Tensor, top_p: float, descending=True, reach=True, back="scatter", first=False
):
    """The tokens a sort-and-cumsum filter keeps when it sorts `scores`: a token stays while the
    scores before it sum to less than top_p (reach=True), or while the sum up to and including
    it is less than top_p (reach=False: one token short). back: how the sorted keep mask is
    taken back to token order, "scatter" (the right way), "gather" (the wrong way) or "none"
    (the sorted mask is applied to the tokens as it is). first: the first sorted token stays
    whatever the sum says (keep_sorted[..., 0] = True)."""
    ordered, order = scores.sort(dim=-1, descending=descending)
    total = ordered.cumsum(-1)
    keep = (total - ordered if reach else total) < top_p
    if first:
        keep[..., 0] = True
    if back == "none":
        return keep
    if back == "gather":
        return keep.gather(-1, order)
    return torch.zeros_like(keep).scatter(-1, order, keep)


NEAR_EDGE = 1e-4  # the closest a cumulative probability comes to top_p in the float32 cases
FLOAT64_NEAR_EDGE = 1e-9  # the closest in the float64 cases: float32 cannot tell it apart
EXACT = "exact boundary"  # in the names of the cases where the nucleus reaches top_p exactly
OTHER_LOGITS = "other logits"  # in the name of a case whose shape, dtype and top_p come earlier
FAR_BELOW = " and one far below them per row (logit -300 or -200)"


def _edges_near(distance: float, dtype: torch.dtype, rows: int = 64, size: int = 8) -> torch.Tensor:
    """(rows, size) logits whose nucleus at top_p = 0.7 has its edge `distance` below top_p in
    the even rows (the sum before the edge token falls short, so that token stays) and
    `distance` above it in the odd rows (the tokens before it reach top_p). Tokens follow the
    edge and the mass spreads differently in each row, so a running sum rounded to a lower
    precision lands on the wrong side of top_p in some row, whichever way it is summed. No two
    probabilities lie within 1e-3 of each other or of 0."""
    generator = torch.Generator().manual_seed(121)
    found = []
    while len(found) < rows:
        side = 1 if len(found) % 2 else -1
        draws = -torch.rand(size, generator=generator, dtype=torch.float64).log()
        ordered = draws.sort(descending=True).values
        edge = int(torch.randint(1, size - 1, (1,), generator=generator))
        before = ordered[:edge] * (0.7 + side * distance) / ordered[:edge].sum()
        after = ordered[edge:] * (0.3 - side * distance) / ordered[edge:].sum()
        probabilities = torch.cat([before, after])  # descending
        if (probabilities[:-1] - probabilities[1:]).min() < 1e-3 or probabilities[-1] < 1e-3:
            continue
        found.append(probabilities[torch.randperm(size, generator=generator)])
    return torch.stack(found).log().to(dtype)


def top_p_cases() -> list[tuple[str, torch.Tensor, float]]:
    """(name, logits (B, V), top_p) for every case the checker runs. In the exact-boundary
    cases, rows of 4 or 8 tied tokens and one far below them (probability e^-200 / size or
    less, 0 in float32, too small to change a sum of the others in float64), every cumulative
    probability is a multiple of 1/8 and exact in any precision, so a nucleus reaches top_p
    exactly. In the other float32 cases none lies within NEAR_EDGE / 2 of top_p, and in one a
    nucleus's edge lies NEAR_EDGE (1e-4) from it, where float16 (about 3 significant digits)
    keeps the wrong tokens: float32 and float64 answers keep the same tokens there (their
    rounding is below 1e-6). In the float64 cases none lies within FLOAT64_NEAR_EDGE / 2 of
    top_p, and in one an edge lies FLOAT64_NEAR_EDGE (1e-9) from it, where float32 (about 7
    significant digits) keeps the wrong tokens: only probabilities in float64 (rounding about
    1e-15 here) keep the right ones. At top_p = 1 every token stays however its probability
    rounds."""
    generator = torch.Generator().manual_seed(120)

    def random(*shape, dtype=torch.float32, scale=2.0):
        return (torch.randn(*shape, generator=generator, dtype=torch.float64) * scale).to(dtype)

    after_top_k = random(3, 9)
    after_top_k[after_top_k < after_top_k.topk(5, dim=-1).values[:, -1:]] = NEG_INF
    dominant = torch.zeros(2, 6)
    dominant[0, 2], dominant[1, 5] = 7.0, 6.0

    def tied(size):
        """(2, 1 + size): a token far below (which an answer that keeps every tie still cuts),
        then `size` tied ones; -300 and -200 make a softmax over the batch axis no tie."""
        logits = torch.zeros(2, 1 + size)
        logits[:, 0] = torch.tensor([-300.0, -200.0])
        return logits

    cases = [
        ("B = 4 rows, V = 10, top_p = 0.7", random(4, 10), 0.7),
        ("one dominant token per row (p > 0.9), top_p = 0.5: only it stays", dominant, 0.5),
        ("top_p = 1 keeps every token", random(2, 7), 1.0),
        (
            "ties: equal logits at the boundary, at the top, and a uniform row; top_p = 0.8",
            torch.tensor(
                [[3.0, 1.0, 1.0, 1.0, 0.0, -1.0], [2.0, -1.0, 2.0, 0.0, -3.0, -3.0], [1.0] * 6]
            ),
            0.8,
        ),
        (
            "two tied top tokens, top_p = 0.3: one of them stays",
            torch.tensor([[2.0, 0, 2, -1]]),
            0.3,
        ),
        ("float64, B = 2, V = 12, top_p = 0.9", random(2, 12, dtype=torch.float64), 0.9),
        ("-inf already in the logits (after top-k = 5), top_p = 0.65", after_top_k, 0.65),
        ("B = 1, V = 5, top_p = 0.25", random(1, 5), 0.25),
        (f"{EXACT}: 4 tied tokens{FAR_BELOW}, top_p = 0.5: 2 reach it", tied(4), 0.5),
        (f"{EXACT}: 8 tied tokens{FAR_BELOW}, top_p = 0.75: 6 reach it", tied(8), 0.75),
        (f"{EXACT}: 8 tied tokens{FAR_BELOW}, top_p = 0.25: 2 reach it", tied(8), 0.25),
        (f"{EXACT}: 4 tied tokens{FAR_BELOW}, top_p = 0.25: 1 reaches it", tied(4), 0.25),
    ]
    one_in_a_thousand = torch.zeros(1, 1000)
    one_in_a_thousand[0, 3] = 30.0  # p = 1 - 9e-11, the other 999 tokens e^-30 = 9e-14 each
    return cases + [
        (
            "top_p = 1, V = 1000: row 0 one token of probability 1 - 9e-11 and 999 of 9e-14 "
            "each, row 1 logits spread wide (randn * 10)",
            torch.cat([one_in_a_thousand, random(1, 1000, scale=10.0)]),
            1.0,
        ),
        (
            "top_p = 1, probabilities that underflow to 0 in float32 (logits -110 to -150 "
            "beside 0 to 3)",
            torch.tensor([[0.0, -120.0, 2.0, -150.0], [3.0, 0.0, -110.0, 1.0]]),
            1.0,
        ),
        (
            "logits up to 100, where exp overflows float32, top_p = 0.9",
            torch.tensor([[99.0, 100.0, 0.0], [98.5, 100.0, 99.0]]),  # row 1 keeps all 3
            0.9,
        ),
        (
            "top_p = 1, -inf already in the logits (after top-k = 5): it stays -inf",
            after_top_k,
            1.0,
        ),
        (
            "V = 1000, top_p = 0.8: nuclei of hundreds of tokens (logits randn * 1.5)",
            random(2, 1000, scale=1.5),
            0.8,
        ),
        (
            f"nucleus edges {NEAR_EDGE:g} from top_p = 0.7, below it in the even rows and above "
            f"it in the odd ones, 64 rows of 8 tokens: float16 cannot tell them apart",
            _edges_near(NEAR_EDGE, torch.float32),
            0.7,
        ),
        (
            f"float64, nucleus edges {FLOAT64_NEAR_EDGE:g} from top_p = 0.7, below it in the even "
            f"rows and above it in the odd ones, 64 rows of 8 tokens: float32 cannot tell them "
            f"apart",
            _edges_near(FLOAT64_NEAR_EDGE, torch.float64),
            0.7,
        ),
        ("B = 6 rows, V = 10, top_p = 0.7", random(6, 10), 0.7),
        (
            f"{OTHER_LOGITS}, B = 4 rows, V = 10, top_p = 0.7 (the first case's shape, dtype and "
            f"top_p)",
            random(4, 10),
            0.7,
        ),
        (
            "top_p = 0.97, B = 3, V = 50 (logits randn * 2): close to 1, the least likely "
            "tokens still go",
            random(3, 50, scale=2.0),
            0.97,
        ),
    ]


LOST_TO_ROUNDING = (
    "a probability below about 1e-45 is 0 in float32, and a running sum of sorted "
    "probabilities reaches 1.0 by rounding before the least likely tokens (float32 tells "
    "numbers near 1 apart to about 1e-7, float64 to about 2e-16), so a test such as "
    "(cumsum - p) < top_p or cumsum <= 1 - top_p drops them at top_p = 1"
)
EVERY_TOKEN_AT_ONE = (
    "at top_p = 1 keep every token outright: a float32 running sum reaches 1.0 by rounding "
    "before the last tokens"
)


ASCENDING = (
    "sorted in ascending order: the nucleus is the most likely tokens, so sort with "
    "descending=True (sorted from the least likely, the running sum reaches top_p only among "
    "the most likely tokens, so it cuts them, or nothing at all)"
)


def _ways_of_computing(logits: torch.Tensor, top_p: float) -> dict:
    """{diagnosis: what that mistake returns} for the mistakes that say how an answer computes
    every nucleus, below top_p = 1 (at 1 every token stays, whatever the way). The checker names
    one only where the answer returns it in every case where it differs from the right answer:
    in one case alone it can coincide with another mistake (a threshold on each probability
    with the sum of the sorted logits where -inf is in the logits, say)."""
    if top_p >= 1:
        return {}
    ways = {
        "the cumulative sum is over the sorted logits: sum the probabilities, softmax(logits), "
        "instead": _kept_only(logits, _kept_by_order(logits, top_p))
    }
    ways[ASCENDING] = _kept_only(logits, _kept_by_order(logits.double().softmax(-1), top_p, False))
    if len(logits) > 1:
        over_everything = logits.flatten().softmax(-1)[None]  # (1, B * V)
        ways[
            "one softmax over the whole batch, flattened: each row's probabilities are the "
            "softmax over its own tokens, softmax(dim=-1) of the (B, V) logits, and each row "
            "gets its own nucleus"
        ] = _kept_only(logits, _kept_by_order(over_everything, top_p).view_as(logits))
        ways[
            "one softmax over the whole batch, flattened, then each row sorted and summed: "
            "each row's probabilities are the softmax over its own tokens, softmax(dim=-1) of "
            "the (B, V) logits, so that each row sums to 1 before its nucleus is cut"
        ] = _kept_only(logits, _kept_by_order(over_everything.view_as(logits), top_p))
        ways[
            "row 0's nucleus is used for every row: each row has its own probabilities, so its "
            "own nucleus; sort and sum every row (dim=-1), and scatter each row's keep mask "
            "back by its own order"
        ] = _kept_only(logits, _kept_by_order(logits[:1].softmax(-1), top_p).expand_as(logits))
    return ways


STILL_SORTED = (
    "the result is still in sorted order: its j-th entry is the j-th most likely token's logit; "
    "return the logits in their own token order, the keep mask taken back to the token "
    "positions (keep = zeros_like(keep_sorted).scatter(-1, order, keep_sorted)) and applied "
    "to the logits as they came"
)


def _still_sorted(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The sorted logits with the nucleus cut in sorted order and never taken back, summed in
    the logits' dtype (at top_p = 1 too, as such an answer does)."""
    ordered = logits.sort(-1, descending=True).values
    return ordered.masked_fill(~_kept_by_order(ordered.softmax(-1), top_p, back="none"), NEG_INF)


def _top_p_mistakes(logits: torch.Tensor, top_p: float) -> dict:
    """{diagnosis: what that mistake returns} for one case; mistakes that return the same
    logits in this case are named together."""
    nucleus = _nucleus(logits, top_p)
    probabilities = logits.double().softmax(-1)
    one_short = _kept_by_order(probabilities, top_p, reach=False)
    if not one_short.any(-1).all():
        short = (
            "the most likely token is dropped where its probability alone exceeds top_p: it "
            "always stays (keep a token while the probability of the tokens before it is < "
            f"top_p, so the nucleus reaches top_p; {EVERY_TOKEN_AT_ONE})"
        )
    else:
        short = (
            "one token short: the nucleus must reach top_p, so keep a token while the "
            "probability of the tokens BEFORE it is < top_p (the cumulative sum minus its own), "
            f"not while the sum including it is ({EVERY_TOKEN_AT_ONE})"
        )
    renormalised = next_token_probabilities(logits, top_p=min(top_p, 1.0))
    mistakes = {
        short: _kept_only(logits, one_short),
        **_ways_of_computing(logits, top_p),
        "the keep mask of the sorted tokens is taken back to token order with gather(-1, "
        "order): the way back is scatter(-1, order, keep)": _kept_only(
            logits, _kept_by_order(probabilities, top_p, back="gather")
        ),
        "the keep mask is in sorted order (its j-th entry is about the j-th most likely token) "
        "but is applied to the logits in token order: scatter it back to token order first, "
        "keep = zeros_like(keep_sorted).scatter(-1, order, keep_sorted)": _kept_only(
            logits, _kept_by_order(probabilities, top_p, back="none")
        ),
        STILL_SORTED: _still_sorted(logits, top_p),
        "returns the nucleus's probabilities, renormalised: return the logits, with -inf at the "
        "dropped tokens (the sampler takes the softmax)": renormalised,
        "returns probabilities (softmax) with 0 at the dropped tokens: return the logits "
        "themselves, with -inf at the dropped tokens": probabilities.masked_fill(~nucleus, 0.0),
        "the dropped tokens are 0, not -inf: a logit of 0 still has probability e^0 / sum, "
        "so set them to -inf": logits.masked_fill(~nucleus, 0.0),
        "the kept logits are changed into log-probabilities renormalised over the nucleus: "
        "keep them exactly as they came (softmax renormalises anyway)": renormalised.log(),
        "the kept logits are changed into log-probabilities (log_softmax): keep them exactly "
        "as they came": probabilities.log().masked_fill(~nucleus, NEG_INF),
        "nothing is cut: every token outside the nucleus must become -inf": logits.clone(),
    }
    over_the_batch = logits.softmax(0)
    if not (over_the_batch == over_the_batch[:, :1]).all(-1).any():
        # (a row whose probabilities all tie, as every row of a batch of one does, keeps the
        # tokens the sort puts first: nothing of this mistake shows there)
        mistakes[
            "the softmax runs over the batch axis (dim 0), mixing the rows: each row's "
            "probabilities are the softmax over its own tokens, softmax(dim=-1)"
        ] = _kept_only(logits, _kept_by_order(over_the_batch, top_p))
    in_float32 = None
    if top_p < 1 and logits.dtype == torch.float64:
        in_float32 = _kept_only(logits, _kept_by_order(logits.float().softmax(-1), top_p))
        mistakes[
            "the probabilities are computed in float32: float64 logits need float64 "
            "probabilities, since a cumulative probability may lie 1e-9 from top_p (in one "
            "case), closer than float32 (about 7 significant digits) tells apart; compute them "
            "in the logits' dtype"
        ] = in_float32
    if top_p < 1:  # at top_p = 1 a rounded running sum is named apart (_dropped_at_one)
        for low, digits in LOWER_PRECISIONS:
            in_low = _kept_only(logits, _kept_by_order(logits.to(low).softmax(-1), top_p))
            if in_float32 is not None and torch.equal(in_low, in_float32):
                continue  # float32 is the likelier slip; the float32 cases name the lower one
            mistakes[
                f"the probabilities are computed in {str(low).removeprefix('torch.')}/lower "
                f"precision, which keeps {digits} significant digits: a cumulative probability "
                f"close to top_p (1e-4 away in one case) rounds to its other side; compute them "
                f"in the logits' dtype"
            ] = in_low
    mistakes.update(
        lower_precision_mistakes(lambda lg: _kept_only(lg, _nucleus(lg, top_p)), logits, "logits")
    )
    ruled_out = logits == NEG_INF
    if ruled_out.any():
        mistakes[
            "NaN where the logit is -inf already (a token cut by top-k): -inf x 0 is NaN: use "
            "masked_fill or where to set the dropped tokens, not a product with the keep mask, "
            "nor a difference such as logits - logits (-inf - -inf is NaN too)"
        ] = _kept_only(logits, nucleus).masked_fill(ruled_out, math.nan)
    exps = logits.exp()
    if exps.isposinf().any():
        overflow = (
            f"exp overflows: e^{logits.max().item():g} is inf in {logits.dtype} (past about "
            f"e^{math.log(torch.finfo(logits.dtype).max):.1f}), and inf / inf is NaN, so the "
            f"row's order is lost. softmax(logits) subtracts the row's maximum before exp; a "
            f"softmax written out must too"
        )
        written_out = exps / exps.sum(-1, keepdim=True)  # NaN where exp overflowed
        mistakes[f"no token kept: {overflow}"] = _kept_only(
            logits, _kept_by_order(written_out, top_p)
        )
        mistakes[overflow] = _kept_only(  # the first sorted token kept, keep_sorted[..., 0] = True
            logits, _kept_by_order(written_out, top_p, first=True)
        )
    return named_together(mistakes)


def _results_of_earlier_cases(earlier: list, logits: torch.Tensor, top_p: float) -> dict:
    """{diagnosis: the right answer of an earlier case of this shape, dtype and top_p}: what an
    answer returns that keeps its results between calls, looked up by those alone."""
    return {
        f"returns its result of an earlier case of this shape, dtype and top_p ({name}): a "
        f"result kept between calls (a cache, or a mutable default argument) is looked up by a "
        f"key that leaves out the logits' values, and each nucleus depends on them": _kept_only(
            before, _nucleus(before, p)
        )
        for name, before, p in earlier
        if before.shape == logits.shape and before.dtype == logits.dtype and p == top_p
    }


def _kept_only(logits: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~kept, NEG_INF)


def _what_the_kept_tokens_show(
    got: object, logits: torch.Tensor, top_p: float, expected: torch.Tensor
) -> str:
    """What is wrong with the kept tokens, " (...)" to add to a value failure no mistake
    explained; "" where the answer cannot be read."""
    if not _readable(got, logits):
        return ""
    got = got.detach()
    already_out = logits == NEG_INF  # tokens the input itself rules out (after top-k, say)
    changed = got.double() != logits.double()
    fills = got[changed & got.isfinite() & ~already_out]
    revived = already_out & got.isfinite()
    if fills.numel() and fills.max() <= -1e3:
        return (
            f" (the dropped tokens hold {fills.max().item():.3g}, a large negative number, not "
            f"-inf: the prompt asks for -inf, the logit of a token that can never be drawn, "
            f"whatever the other logits are)"
        )
    if revived.any():
        row, token = revived.nonzero()[0].tolist()
        return (
            f" (row {row}'s token {token} is -inf in the input, a token already ruled out (cut "
            f"by top-k, say), and comes back as {got[row, token].item():.3g}: it must stay -inf, "
            f"also at top_p = 1, where every logit comes back as it came; nan_to_num or a clamp "
            f"of the logits replaces it)"
        )
    kept, nucleus = got > NEG_INF, expected > NEG_INF
    empty = (~kept.any(-1)).nonzero().flatten().tolist()
    probabilities = logits.double().softmax(-1)
    least = probabilities.masked_fill(~nucleus, float("inf")).amin(-1, keepdim=True)
    extra = kept & ~nucleus
    one_too_many = [
        row
        for row in range(len(kept))
        if kept[row].sum() == nucleus[row].sum() + 1
        and abs(probabilities[row][kept[row]].sum() - probabilities[row][kept[row]].min() - top_p)
        < 1e-6
    ]
    if empty:
        return (
            f" (row {empty[0]} keeps no token: the most likely token always stays, even when its "
            f"probability alone exceeds top_p)"
        )
    most_likely = probabilities == probabilities.amax(-1, keepdim=True)
    without_it = (~(kept & most_likely).any(-1)).nonzero().flatten().tolist()
    if without_it:
        row = without_it[0]
        return (
            f" (row {row} drops its most likely token, token "
            f"{most_likely[row].nonzero()[0].item()}: the nucleus is the most likely tokens, and "
            f"the first of them always stays; after a sort, keep_sorted[..., 0] must be True)"
        )
    if torch.equal(kept, nucleus):
        return (
            " (the right tokens are kept but their logits changed: return them exactly as they "
            "came, -inf at the others)"
        )
    if top_p >= 1 and (kept <= nucleus).all():
        return f" ({_dropped_at_one(kept, nucleus, logits)})"
    rounded = _rounded_across_top_p(kept, nucleus, probabilities, top_p)
    if rounded:
        return rounded
    if one_too_many:
        row = one_too_many[0]
        return (
            f" (row {row} keeps {int(kept[row].sum())} tokens, one too many: the tokens before "
            f"its least likely one already reach top_p = {top_p} exactly. Keep a token while the "
            f"probability of the tokens before it is < top_p, not <= top_p)"
        )
    if (
        extra.any()
        and (nucleus <= kept).all()
        and (probabilities[extra] == least.expand_as(extra)[extra]).all()
    ):
        row = extra.any(-1).nonzero()[0].item()
        return (
            f" (row {row} keeps every token tied with the least likely one of the nucleus, "
            f"{int(kept[row].sum())} tokens where {int(nucleus[row].sum())} already reach "
            f"top_p: the nucleus is the smallest such set, so keep only as many of the tied "
            f"tokens as it needs, any of them)"
        )
    row = (kept != nucleus).any(-1).nonzero()[0].item()
    size, wanted = int(kept[row].sum()), int(nucleus[row].sum())
    if size == wanted:
        dropped = (nucleus[row] & ~kept[row]).nonzero()[0].item()
        instead = (kept[row] & ~nucleus[row]).nonzero()[0].item()
        return (
            f" (row {row} keeps token {instead} instead of the more likely token {dropped}: "
            f"the nucleus is made of the most likely tokens)"
        )
    return (
        f" (row {row} keeps {size} of its tokens, the nucleus holds {wanted}: the smallest set "
        f"of most likely tokens whose probabilities sum to at least top_p)"
    )


def _rounded_across_top_p(
    kept: torch.Tensor, nucleus: torch.Tensor, probabilities: torch.Tensor, top_p: float
) -> str:
    """What an answer shows whose kept tokens differ from the nucleus, in each row where they
    differ, by the one token where the probability before it lies within 1e-3 of top_p, but not
    on it: a running sum rounded to the wrong side of top_p. "" otherwise."""
    differ = (kept != nucleus).any(-1).nonzero().flatten().tolist()
    before = probabilities.sort(-1, descending=True)
    mass_before = torch.zeros_like(probabilities).scatter(
        -1, before.indices, before.values.cumsum(-1) - before.values
    )  # (B, V): the probability of the tokens more likely than each
    distance = (mass_before - top_p).abs()
    near = (distance > 0) & (distance <= 1e-3)
    if not differ or ((kept != nucleus).sum(-1) > 1).any() or (near < (kept != nucleus)).any():
        return ""
    row = differ[0]
    token = (kept[row] != nucleus[row]).nonzero()[0].item()
    distance = mass_before[row, token].item() - top_p
    return (
        f" (row {row} {'keeps' if kept[row, token] else 'drops'} token {token}, where the "
        f"tokens more likely than it sum to top_p {'+' if distance > 0 else '-'} "
        f"{abs(distance):.1g}: a running sum in lower precision (float16 keeps about 3 "
        f"significant digits, float32 about 7) lands on the wrong side of top_p there, and so "
        f"does a comparison with a margin (cumsum - p < top_p - 1e-5, say). Compute the "
        f"probabilities and their cumulative sum in the logits' dtype, and compare with top_p "
        f"itself)"
    )


def _dropped_at_one(kept: torch.Tensor, nucleus: torch.Tensor, logits: torch.Tensor) -> str:
    """What an answer that drops tokens at top_p = 1, where every token stays, ran into."""
    row, token = (nucleus & ~kept).nonzero()[0].tolist()
    probability = logits[row].double().softmax(-1)[token].item()
    return (
        f"row {row} keeps {int(kept[row].sum())} of its {int(nucleus[row].sum())} tokens at "
        f"top_p = 1, where every token stays, token {token} of probability {probability:.1e} "
        f"dropped: {LOST_TO_ROUNDING}. Return the logits as they came when top_p >= 1"
    )


@exercise_checker
def check_top_p_filter(learner_filter: Callable) -> bool:
    """learner_filter(logits, top_p) -> (B, V): logits (B, V), float32 or float64, V from 2 to
    1000 (nuclei of up to hundreds of tokens), some maybe -inf already, some as large as 100
    (where exp overflows float32), without requires_grad as a sampler's logits come; top_p in
    (0, 1]. Every token outside the nucleus becomes -inf, the kept ones keep their logits
    unchanged, in the logits' dtype (an -inf already there stays -inf, at top_p = 1 too). The
    nucleus: the smallest set of most likely tokens (by softmax(logits)) whose probabilities
    sum to at least top_p (a set that reaches it exactly is the nucleus: the next token goes);
    a cumulative probability may lie 1e-4 from top_p, closer than float16 tells apart, and in
    a float64 case 1e-9, closer than float32 tells apart, so the probabilities and their
    running sum are computed in the logits' dtype. The most likely token always stays, and
    top_p = 1 keeps every token, also one whose probability underflows to 0 and those a
    running sum of the sorted probabilities reaches only after it has rounded to 1. Where
    tokens of equal probability straddle the boundary, any of them may stay (the set must
    still be that small). The input is left as it was (no in-place operation on it, even one
    that changes no value, and its requires_grad as it came, no hook left on it). The gradients are
    not checked: nothing is learned through a filter before sampling. Without helpers.gpt's
    next_token_probabilities (a call to it is refused). Each call returns within 5 s and leaves
    torch's grad mode, default dtype, random generator, anomaly detection,
    deterministic-algorithms setting, thread count and module hooks as they were."""
    failures, passed, answers_in_time = [], 0, TimedAnswers(learner_filter)
    naming_a_way, fits = [], {}  # fits: {way of computing: the answer returns it so far}
    outcomes = []  # (name, logits, top_p, the answer, index of its failure or None)
    cases = top_p_cases()
    for index, (name, logits, top_p) in enumerate(cases):
        mistakes = {
            **_top_p_mistakes(logits, top_p),
            **_results_of_earlier_cases(cases[:index], logits, top_p),
        }
        answers = {}

        def learner(lg, p, answers=answers):
            answers["got"] = answers_in_time(lg.detach(), p)  # as a sampler's logits come
            if isinstance(answers["got"], torch.Tensor) and answers["got"].dtype == torch.bool:
                raise Refused(
                    "returns which tokens stay, a boolean mask: return the logits themselves, "
                    "with -inf at the dropped tokens"
                )
            return answers["got"]

        def reference(lg, p, answers=answers):
            chosen = _nucleus_like(answers.get("got"), lg, p)
            return lg.masked_fill(~chosen, NEG_INF).detach()

        atol = 1e-6 if logits.dtype == torch.float64 else 1e-5
        wrong = wrong_only(mistakes, reference(logits, top_p))
        right = run_case(
            name,
            learner,
            (logits, top_p),
            reference,
            failures,
            atol=atol,
            mistakes=wrong,
            forbidden={
                "helpers.gpt.next_token_probabilities": next_token_probabilities,
                "helpers.gpt._nucleus": gpt._nucleus,
                "the checker's own top-p filter": _nucleus,
                "the checker's own nucleus": _kept_by_order,
            },
            names=("logits", "top_p"),
        )
        got, expected = answers.get("got"), reference(logits, top_p)
        ways = _ways_of_computing(logits, top_p)
        for way, returns in ways.items():
            if _readable(got, logits) and any(way in diagnosis for diagnosis in wrong):
                fits[way] = fits.get(way, True) and torch.allclose(
                    got.detach().double(), returns.double(), atol=atol, equal_nan=True
                )
        if not right and any(way in failures[-1] for way in ways):
            naming_a_way.append((len(failures) - 1, got, logits, top_p, expected, list(wrong)))
        elif (
            not right
            and failures[-1].startswith(f"{name}: at index")
            and not any(diagnosis in failures[-1] for diagnosis in mistakes)
        ):
            failures[-1] += _what_the_kept_tokens_show(got, logits, top_p, expected)
        passed += right
        outcomes.append((name, logits, top_p, got, None if right else len(failures) - 1))
    for index, got, logits, top_p, expected, diagnoses in naming_a_way:
        for way in [
            way for way, fit in fits.items() if fit
        ]:  # it alone, not what it coincides with
            for joined in diagnoses:
                if way in joined and way != joined:
                    failures[index] = failures[index].replace(f"({joined})", f"({way})")
        for way in [way for way, fit in fits.items() if not fit and way in failures[index]]:
            failures[index], nothing_named = _taken_out(failures[index], way)
            if nothing_named:
                failures[index] += _what_the_kept_tokens_show(got, logits, top_p, expected)
                break
    _name_a_fixed_top_p(failures, outcomes)
    _said_once(failures, (f"; {EVERY_TOKEN_AT_ONE}", f" ({EVERY_TOKEN_AT_ONE})"))
    return report(failures, passed)


def _said_once(failures: list, forms: tuple) -> None:
    """Keep a long aside, in any of its forms, in the first failure that says it and take it
    out of the others, so that a mistake made in every case does not repeat it in every line."""
    saying = [index for index, failure in enumerate(failures) if any(f in failure for f in forms)]
    for index in saying[1:]:
        for form in forms:
            failures[index] = failures[index].replace(form, "")


def _name_a_fixed_top_p(failures: list, outcomes: list) -> None:
    """outcomes: (name, logits, top_p, the answer, index of its failure or None) per case.
    Where the answer keeps, in every case, the nucleus of one of the cases' top_p below 1, and
    each case it fails is a wrong value, it filters with that top_p whatever top_p says: name
    that in each case it fails."""
    wrong = [
        (name, top_p, failure) for name, _, top_p, _, failure in outcomes if failure is not None
    ]
    if not wrong or not all(_a_wrong_value(failures[failure], name) for name, _, failure in wrong):
        return
    for fixed in sorted({top_p for _, _, top_p, _, _ in outcomes if top_p < 1}):
        if all(
            _readable(got, logits)
            and torch.allclose(
                got.detach().double(),
                _kept_only(logits, _nucleus_like(got, logits, fixed)).double(),
                atol=1e-6,
                equal_nan=True,
            )
            for _, logits, _, got, _ in outcomes
        ):
            for name, top_p, failure in wrong:
                _renamed(
                    failures,
                    failure,
                    name,
                    f"keeps the same nucleus whatever top_p is, that of top_p = {fixed:g} (here "
                    f"top_p = {top_p:g}): use the top_p argument",
                )
            return


def _taken_out(failure: str, diagnosis: str) -> tuple[str, bool]:
    """The failure without `diagnosis` among the mistakes it names (named_together joins them
    with "; or "), and whether it names no other."""
    for joined in (f"{diagnosis}; or ", f"; or {diagnosis}"):
        if joined in failure:
            return failure.replace(joined, ""), False
    return failure.replace(f" ({diagnosis})", ""), True


# 2. The prefix-LM mask


def _prompt_positions(prompt_lengths: torch.Tensor, size: int, shift: int = 0) -> torch.Tensor:
    """(B, size) bool: position i is in row b's prompt, i < prompt_lengths[b] + shift."""
    return torch.arange(size)[None, :] < (prompt_lengths[:, None] + shift)


def _prefix_mask_with(prompt_lengths, size, shift=0) -> torch.Tensor:
    """The prefix-LM mask for prompts `shift` positions longer than prompt_lengths."""
    in_prompt = _prompt_positions(prompt_lengths, size, shift)
    return causal_mask(size)[None] | (in_prompt[:, :, None] & in_prompt[:, None, :])


_LEAK = (
    "the answer leaks into the prompt: prompt position {i} of row {b} reads position {j}, which "
    "belongs to the answer (the prompt is positions 0..{last}). A prompt position may read the "
    "whole prompt, never what comes after it: at generation time the answer does not exist yet"
)


SENTENCE_SIZE = 24  # the last prefix-mask case's size, longer than the others'


def prefix_mask_cases() -> list[tuple[str, torch.Tensor, int]]:
    """(name, prompt_lengths (B,), size) for every case the checker runs."""
    return [
        ("prompt lengths 0: no prompt, the plain causal mask", torch.tensor([0, 0]), 4),
        ("prompt lengths = size: every position reads every position", torch.tensor([5, 5]), 5),
        ("prompt lengths 3, 0, 6 and 1 in one batch, size 6", torch.tensor([3, 0, 6, 1]), 6),
        ("one row, prompt length 3, size 5", torch.tensor([3]), 5),
        ("size 1, prompt lengths 0 and 1", torch.tensor([0, 1]), 1),
        (
            f"prompt lengths 7, 24, 0 and 13, size {SENTENCE_SIZE} (a sentence's length, longer "
            f"than the cases before)",
            torch.tensor([7, 24, 0, 13]),
            SENTENCE_SIZE,
        ),
    ]


EVERY_PAIR = (
    "the mask is True everywhere: every position reads every position, the answer included; it "
    "is causal (position i reads positions 0..i), and only the prompt positions also read the "
    "later prompt positions"
)
LONGEST_PROMPT = (
    "every row uses the batch's longest prompt, prompt_lengths.max(): row b's prompt is its own "
    "prompt_lengths[b] positions, and a shorter prompt must not read the answer after it"
)


def _prefix_mistakes(prompt_lengths: torch.Tensor, size: int) -> dict:
    right = prefix_lm_mask(prompt_lengths, size)
    in_prompt = _prompt_positions(prompt_lengths, size)
    causal = causal_mask(size)[None].expand_as(right)
    first = prompt_lengths[0].item()
    mistakes = {
        EVERY_PAIR: torch.ones_like(right),
        "True where attending is NOT allowed: in this project True means may attend": ~right,
        "this is the plain causal mask: the answer reads the whole prompt under it anyway; what "
        "a prefix-LM adds is that each prompt position reads the LATER prompt positions too": (
            causal
        ),
        "LEAK: a prompt position reads the whole row, the answer included. A prompt position "
        "may read the prompt only; the answer must stay invisible to it": (
            causal | in_prompt[:, :, None]
        ),
        "off by one, and a LEAK: a prompt of length L is positions 0..L-1, and here position L, "
        "the answer's first token, is read by the prompt": _prefix_mask_with(
            prompt_lengths, size, shift=1
        ),
        "off by one: a prompt of length L is positions 0..L-1, and here its last position "
        "L-1 is left out of it": _prefix_mask_with(prompt_lengths, size, shift=-1),
        "the causal part is transposed, the upper triangle (causal_mask(size).T, or triu): "
        "there position i reads the LATER positions i..size-1; causal means key j <= query i, "
        "the lower triangle, position i reading positions 0..i": (
            causal.transpose(-2, -1) | (in_prompt[:, :, None] & in_prompt[:, None, :])
        ),
        "the answer cannot read the prompt: outside the prompt the mask is causal, so an "
        "answer position reads the whole prompt and the answer before it": (
            (in_prompt[:, :, None] & in_prompt[:, None, :]) | (causal & ~in_prompt[:, None, :])
        ),
        "every row uses the first row's prompt length: row b's prompt is its own "
        "prompt_lengths[b] positions": _prefix_mask_with(
            torch.full_like(prompt_lengths, first), size
        ),
        LONGEST_PROMPT: _prefix_mask_with(
            torch.full_like(prompt_lengths, prompt_lengths.max()), size
        ),
    }
    return named_together(mistakes)


def _name_the_leak(
    failures: list, got: object, prompt_lengths: torch.Tensor, size: int, index: int = -1
):
    """Name in failures[index] the first connection a boolean mask of the right shape gets
    wrong."""
    expected = prefix_lm_mask(prompt_lengths, size)
    if not (isinstance(got, torch.Tensor) and got.dtype == torch.bool):
        return
    if got.shape != expected.shape:
        return
    borrowed = _another_rows_length(got, prompt_lengths, size)
    if borrowed is not None:
        b, length = borrowed
        failures[index] += (
            f" (rows have other rows' prompt lengths: row {b} holds the mask of a prompt of "
            f"length {length}, another row's, where prompt_lengths[{b}] = "
            f"{prompt_lengths[b].item()}; row b's prompt is its own first prompt_lengths[b] "
            f"positions, in the order given: are the lengths sorted or reordered?)"
        )
        return
    extra, missing = got & ~expected, expected & ~got
    for b, i, j in extra.nonzero().tolist():
        length = prompt_lengths[b].item()
        if i < length <= j:
            failures[index] += f" ({_LEAK.format(i=i, b=b, j=j, last=length - 1)})"
            return
    if extra.any():
        b, i, j = extra.nonzero()[0].tolist()
        if prompt_lengths[b] == 0:
            prompted = prompt_lengths > 0
            only_here = prompted.any() and torch.equal(got[prompted], expected[prompted])
            whole_row = (
                ". A prompt of length L is positions 0..L-1, none when L = 0: beware of L - 1 = "
                "-1 as a slice end, which Python reads as the last position"
                if got[b].all() and only_here  # the rows with a prompt are right
                else ""
            )
            failures[index] += (
                f" (row {b} has no prompt, prompt_lengths[{b}] = 0, so it is the plain causal "
                f"mask, position i reading positions 0..i only; yet its position {i} reads the "
                f"later position {j}{whole_row})"
            )
        else:
            failures[index] += (
                f" (in row {b}, position {i} reads the later position {j}: after the prompt the "
                f"mask is causal, position i reads positions 0..i only)"
            )
    elif missing.any():
        b, i, j = missing.nonzero()[0].tolist()
        if j <= i:
            failures[index] += (
                f" (in row {b}, position {i} cannot read position {j}: the mask is causal, "
                f"every position reads itself and the positions before it)"
            )
        else:
            failures[index] += (
                f" (in row {b}, position {i} cannot read the later position {j}, though both lie "
                f"in the row's prompt, positions 0..{prompt_lengths[b].item() - 1}: the prompt "
                f"reads the whole prompt)"
            )


def _another_rows_length(
    got: torch.Tensor, prompt_lengths: torch.Tensor, size: int
) -> tuple[int, int] | None:
    """(b, length): the first wrong row and another row's prompt length whose mask it holds,
    where the rows hold the masks of the given lengths in another order; None otherwise."""
    by_length = _prefix_mask_with(torch.arange(size + 1), size)  # (size + 1, size, size)

    def first_alike(mask):  # the shortest length with this mask (0 and 1 share one, ...)
        return next((length for length, m in enumerate(by_length) if torch.equal(mask, m)), None)

    held = [first_alike(row) for row in got]
    given = [first_alike(by_length[length]) for length in prompt_lengths.tolist()]
    expected = _prefix_mask_with(prompt_lengths, size)
    wrong = [b for b in range(len(got)) if not torch.equal(got[b], expected[b])]
    if not wrong or None in held or sorted(held) != sorted(given):
        return None
    b = wrong[0]
    return b, next(
        length for length in prompt_lengths.tolist() if torch.equal(got[b], by_length[length])
    )


def _name_the_shape(failures: list, got: object, batch: int) -> None:
    if not isinstance(got, torch.Tensor):
        return
    if got.dim() == 2:
        failures[-1] += (
            " (no batch dimension: each row has its own prompt length, so one (size, size) "
            "mask per row, (B, size, size))"
        )
    elif got.dim() == 3 and got.shape[-1] == batch and got.shape[0] == got.shape[1] != batch:
        failures[-1] += (
            " (the batch axis is last: (size, size, B); the mask is (B, size, size), one "
            "(size, size) mask per row, the batch first)"
        )
    elif got.dim() == 3 and got.shape[0] == 1 and batch > 1:
        failures[-1] += (
            " (one mask for the whole batch: each row has its own prompt length, so one "
            "(size, size) mask per row, (B, size, size))"
        )


@exercise_checker
def check_prefix_lm_mask(learner_mask: Callable) -> bool:
    """learner_mask(prompt_lengths, size) -> a (B, size, size) bool tensor, True = may attend:
    prompt_lengths (B,) int64, each in 0..size. Row b's prompt is its first prompt_lengths[b]
    positions. Causal (position i reads positions 0..i), except that every prompt position
    also reads every prompt position; no prompt position ever reads the answer after it.
    prompt_lengths is left as it was (no in-place operation on it, even one that changes no
    value). Without helpers.decoder_only.prefix_lm_mask (a call to it is refused;
    helpers.masks.causal_mask is allowed). Each call returns within 5 s and leaves torch's grad
    mode, default dtype, random generator, anomaly detection, deterministic-algorithms setting,
    thread count and module hooks as they were."""
    failures, passed, answers_in_time = [], 0, TimedAnswers(learner_mask)
    cases = prefix_mask_cases()
    all_true = True  # the answer is True everywhere in every case so far
    answered = {}  # index of a failure: (the answer, prompt_lengths, size) of its case
    for index, (name, prompt_lengths, size) in enumerate(cases):
        mistakes = _prefix_mistakes(prompt_lengths, size)
        answers = {}

        def learner(lengths, n, answers=answers):
            answers["got"] = answers_in_time(lengths, n)
            return answers["got"]

        right = run_case(
            name,
            learner,
            (prompt_lengths, size),
            prefix_lm_mask,
            failures,
            atol=0.0,
            mistakes=wrong_only(mistakes, prefix_lm_mask(prompt_lengths, size)),
            forbidden={
                "helpers.decoder_only.prefix_lm_mask": prefix_lm_mask,
                "the checker's own prefix mask": _prefix_mask_with,
            },
            names=("prompt_lengths", "size"),
        )
        got = answers.get("got")
        all_true = all_true and _readable_mask(got, prompt_lengths, size) and bool(got.all())
        if not right:
            answered[len(failures) - 1] = (got, prompt_lengths, size)
            if failures[-1].startswith(f"{name}: shape "):
                _name_the_shape(failures, got, len(prompt_lengths))
            elif failures[-1].startswith(f"{name}: at index") and not any(
                diagnosis in failures[-1] for diagnosis in mistakes
            ):
                _name_the_leak(failures, got, prompt_lengths, size)
            if size == SENTENCE_SIZE and passed == index:  # every shorter case passed
                longest_before = max(size for _, _, size in cases[:index])
                failures[-1] += (
                    f"; every case before this one, of size {longest_before} at most, passed: "
                    f"is a size typed in (causal_mask({longest_before}), "
                    f"range({longest_before})) where the argument `size` belongs?"
                )
        passed += right
    # Where the longest prompt is the whole row, its mask is True everywhere: the cases where
    # it is not tell the two mistakes apart.
    wrong_one = LONGEST_PROMPT if all_true else EVERY_PAIR
    for index, failure in enumerate(failures):
        if wrong_one in failure:
            failures[index], unnamed = _taken_out(failure, wrong_one)
            if unnamed:
                _name_the_leak(failures, *answered[index], index=index)
    return report(failures, passed)


def _readable_mask(got: object, prompt_lengths: torch.Tensor, size: int) -> bool:
    return (
        isinstance(got, torch.Tensor)
        and got.layout == torch.strided
        and not got.is_meta
        and got.shape == (len(prompt_lengths), size, size)
    )


# 3. The loss over the answer


def _answer_loss(logits, sequences, separator_id):
    targets = loss_targets(sequences, separator_id, "answer")  # (B, T - 1)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD_ID)


def _losses(logits, targets):
    """(B, T - 1): the cross-entropy of every position, pads included."""
    return F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


PADS_AFTER_EOS = "the pads after <eos> are scored: leave the <pad> targets out of the mean"
PADS_READ = (
    "the pads are found among the tokens read, sequences[:, :-1] != 0: the position that reads "
    "<eos> predicts a <pad>, and it is scored; leave out the positions whose TARGET is <pad>, "
    "sequences[:, 1:] != 0"
)


def _pads_of_the_inputs(logits, targets, after_sep, from_sep, read, mean_over) -> dict:
    """The pads found among the tokens read, named beside "the pads after <eos> are scored"
    where the two give one loss (no row holds more than one <pad>)."""
    every_pad = _losses(logits, targets).masked_fill(~after_sep, 0.0).sum() / after_sep.sum()
    scored_at_eos = mean_over(after_sep & (read != PAD_ID))
    alike = torch.allclose(scored_at_eos.double(), every_pad.double(), rtol=0, atol=1e-9)
    return {
        f"{PADS_READ}; or {PADS_AFTER_EOS}" if alike else PADS_READ: scored_at_eos,
        f"{PADS_READ}; and the prediction of <sep> is scored too: the answer's targets are the "
        f"tokens after <sep>, the first read at <sep> itself": mean_over(
            from_sep & (read != PAD_ID)
        ),
    }


def _answer_mistakes(logits, sequences, separator_id) -> dict:
    targets = sequences[:, 1:]  # (B, T - 1): position t predicts token t + 1
    seen = (sequences == separator_id).long().cumsum(1)  # (B, T): <sep> at or before t
    after_sep = seen[:, :-1] > 0  # (B, T - 1): the target comes after <sep>
    answer = targets.masked_fill(~after_sep, PAD_ID)
    scored = answer != PAD_ID
    losses = _losses(logits, answer)

    def mean_over(chosen):  # (B, T - 1) bool: the positions scored
        return F.cross_entropy(logits[chosen], targets[chosen])

    after_first = F.pad(seen[:, :-2], (1, 0)) > 0  # the target comes after <sep>'s successor
    read = sequences[:, :-1]  # (B, T - 1): the token each position reads
    answer_read = (seen[:, :-1] > 0) & (read != separator_id) & (read != PAD_ID)
    over_time = -logits.log_softmax(1).gather(-1, targets[..., None])[..., 0]  # (B, T - 1)
    chosen_probabilities = logits.softmax(-1).gather(-1, targets[..., None])[..., 0]
    first_separator = (sequences[0] == separator_id).nonzero()[0, 0]
    mistakes = {
        "the first French token is left out: the position of <sep> itself predicts it, so "
        "score every target after <sep>, from the one read at <sep>": mean_over(
            after_first & (targets != PAD_ID)
        ),
        "only the token right after <sep> is scored, the first French token: score every "
        "target after <sep>, the rest of the French and the closing <eos> too": mean_over(
            read == separator_id
        ),
        "<eos> is left out: the closing <eos> is part of the answer (it teaches the model to "
        "stop), so score it too": mean_over(scored & (targets != EOS_ID)),
        "F.nll_loss is given the raw logits: it takes log-probabilities and returns minus the "
        "entry at the target, so apply log_softmax(-1) first (or use F.cross_entropy, which "
        "does both)": -logits.gather(-1, targets[..., None])[..., 0][scored].mean(),
        "every row uses the first row's <sep> position: each row's answer starts after its own "
        "<sep>, which lies elsewhere in a row whose English has another length": mean_over(
            (torch.arange(targets.shape[1]) >= first_separator) & (targets != PAD_ID)
        ),
        "probabilities are used where the loss takes log-probabilities: cross-entropy is "
        "-log softmax(logits)[target] (F.nll_loss wants log_softmax, not softmax)": (
            -chosen_probabilities[scored].mean()
        ),
        "F.cross_entropy is given probabilities (softmax): it takes the raw logits and applies "
        "log_softmax itself, so pass the logits as they are": F.cross_entropy(
            logits.softmax(-1)[scored], targets[scored]
        ),
        "1 - p, the probability the target misses, is averaged instead of -log p: the "
        "cross-entropy is -log softmax(logits)[target] (F.cross_entropy)": (
            1 - chosen_probabilities
        )[scored].mean(),
        "the targets are the model's own predictions, logits.argmax(-1): the targets are the "
        "tokens that come next, sequences[:, 1:]": F.cross_entropy(
            logits[scored], logits.argmax(-1)[scored]
        ),
        "the English is scored instead of the answer: the mask is the wrong way round; score "
        "the targets AFTER <sep>": mean_over(~after_sep & (targets != PAD_ID)),
        "the English is scored instead of the answer: score the targets after <sep> (the "
        "French and <eos>), not the English before it": mean_over(
            (seen[:, 1:] == 0) & (targets != PAD_ID)
        ),
        "log_softmax is taken over the positions (dim 1): each position's distribution is over "
        "the vocabulary, the last dimension (dim=-1)": over_time[scored].mean(),
        "the prediction of <sep> is scored too: score only the targets AFTER <sep> (the French "
        "tokens and <eos>), the first one at the position of <sep> itself": mean_over(
            (seen[:, 1:] > 0) & (targets != PAD_ID)
        ),
        "the English is scored too: that is the loss over the whole sequence; score only the "
        "targets after <sep>": mean_over(targets != PAD_ID),
        PADS_AFTER_EOS: (losses.masked_fill(~after_sep, 0.0).sum() / after_sep.sum()),
        "the pads after <eos> are scored as predictions of <eos>: a <pad> target is no token of "
        "the answer; leave it out of the loss (ignore_index=0), do not turn it into <eos>": (
            F.cross_entropy(
                logits[after_sep], targets.masked_fill(targets == PAD_ID, EOS_ID)[after_sep]
            )
        ),
        **_pads_of_the_inputs(logits, targets, after_sep, seen[:, 1:] > 0, read, mean_over),
        "the sum over the scored positions is divided by every position after <sep>, the pads "
        "after <eos> included: divide by the number of scored positions only, the French "
        "tokens and <eos>": (losses * scored).sum() / after_sep.sum(),
        "the positions set to <pad> (the English and the padding) are scored as predicting "
        "<pad>: leave them out (ignore_index=0 in F.cross_entropy)": F.cross_entropy(
            logits.flatten(0, 1), answer.flatten()
        ),
        "the targets are not shifted: position t predicts token t + 1, so the targets are "
        "sequences[:, 1:]": F.cross_entropy(
            logits.flatten(0, 1),
            sequences[:, :-1].masked_fill(~after_sep, PAD_ID).flatten(),
            ignore_index=PAD_ID,
        ),
        "the targets are the tokens the positions read, sequences[:, :-1], scored where they "
        "belong to the answer: position t's logits predict the NEXT token, so the targets are "
        "sequences[:, 1:]": F.cross_entropy(logits[answer_read], read[answer_read]),
        "the targets are not shifted, sequences[:, :-1] on the right positions: position t "
        "predicts token t + 1: targets are sequences[:, 1:]": F.cross_entropy(
            logits[scored], read[scored]
        ),
        "row 0's mask is used for every row: each row's answer starts after its own <sep> and "
        "ends at its own <eos>, so build the mask from each row's own tokens": mean_over(
            scored[:1].expand_as(scored)
        ),
        "the logits are sliced again (logits[:, :-1]): they hold T - 1 positions already, one "
        "per target of sequences[:, 1:], so slicing leaves out the last position's prediction "
        "(the longest row's <eos>); slice the sequences only": mean_over(
            scored & (torch.arange(targets.shape[1]) < targets.shape[1] - 1)
        ),
        **lower_precision_mistakes(
            lambda lg: _answer_loss(lg, sequences, separator_id), logits, "logits"
        ),
        "a mean per sentence, then over the sentences: that weighs a short answer's tokens "
        "more; take one mean over every scored position of the batch": (
            (losses * scored).sum(1) / scored.sum(1)
        ).mean(),
        "the sum over the scored positions: take their mean": (losses * scored).sum(),
        "the sum over the scored positions is divided by ALL positions, B * (T - 1), the "
        "unscored ones counted in the denominator: divide by the number of scored positions "
        "only": (losses * scored).sum() / scored.numel(),
        "the sum over the scored positions is divided by the batch size B: divide by the "
        "number of scored positions, the tokens of every row's answer": (losses * scored).sum()
        / len(sequences),
        "the sum over the scored positions is divided by every target that is not <pad>, the "
        "English's included: divide by the number of scored positions only": (
            (losses * scored).sum() / (targets != PAD_ID).sum()
        ),
        "the sign is flipped (returns -loss): cross-entropy is MINUS the mean log-probability "
        "of the targets, a positive number": -_answer_loss(logits, sequences, separator_id),
        "label smoothing: the exercise's loss is the plain cross-entropy": F.cross_entropy(
            logits.flatten(0, 1), answer.flatten(), ignore_index=PAD_ID, label_smoothing=0.1
        ),
    }
    one_hot = F.one_hot(targets[scored], logits.shape[-1]).to(logits.dtype)
    squared_errors = (logits[scored].softmax(-1) - one_hot) ** 2
    for how, squared_error in (
        ("summed over the vocabulary, then averaged", squared_errors.sum(-1).mean()),
        ("F.mse_loss, averaged over the vocabulary too", squared_errors.mean()),
    ):
        mistakes[
            f"the squared error between the softmax and a one-hot target ({how}), not the "
            f"cross-entropy: the loss is -log softmax(logits)[target], averaged over the scored "
            f"positions (F.cross_entropy)"
        ] = squared_error
    shifted_again = scored[:, 1:]  # the targets of sequences[:, 2:], position t's token t + 2
    mistakes[
        "position t's logits are scored against token t + 2 (logits[:, :-1] against targets[:, "
        "1:], a second shift): the logits are (B, T - 1, V) already, position t's prediction of "
        "token t + 1, so they pair with sequences[:, 1:] as they are"
    ] = F.cross_entropy(logits[:, :-1][shifted_again], targets[:, 1:][shifted_again])
    mistakes[
        "returns exp(loss), the perplexity, not the mean cross-entropy: return the loss itself"
    ] = _answer_loss(logits, sequences, separator_id).exp()
    chosen = logits.softmax(-1).log().gather(-1, targets[..., None])[..., 0]
    mistakes[
        "the log of the softmax: a probability below the dtype's smallest number is 0 and its "
        "log -inf; take log_softmax (or F.cross_entropy), which subtracts the log-sum-exp "
        "without exponentiating the target's logit"
    ] = -chosen[scored].mean()
    if separator_id != 8000:
        hard_wired = loss_targets(sequences, 8000, "answer").flatten()
        fixed = F.cross_entropy(logits.flatten(0, 1), hard_wired, ignore_index=PAD_ID)
        if fixed.isfinite():  # NaN where no 8000 is found: a NaN answer may have other causes
            mistakes[_fixed_separator(8000, separator_id)] = fixed
    return mistakes


OVERFLOW = (
    "exp(logits) overflows the dtype (float32's largest number is about e^88.7) and inf / inf "
    "is NaN: take log_softmax (or F.cross_entropy), which subtracts each row's largest logit "
    "before exponentiating"
)


def _name_a_nan(failures: list, nan_failures: list, cases: int) -> None:
    """Where the answer is NaN in the case of large logits alone (every other case gives a
    number), it exponentiates them; where it is NaN in every case, it most likely scores no
    position at all: name either."""
    if len(nan_failures) == 1 and nan_failures[0][0].startswith("logits about 95"):
        name, index = nan_failures[0]
        failures[index] = f"{name}: NaN at index () ({OVERFLOW})"
    elif len(nan_failures) == cases:
        for name, index in nan_failures:
            failures[index] = (
                f"{name}: NaN at index () (NaN in every case: a mean over no position at all is "
                f"0 / 0, and a NaN or inf, such as a -inf logit, times a 0 of a mask stays NaN; "
                f"check that some position is scored, and select the scored positions rather "
                f"than multiplying by a mask)"
            )


def _fixed_separator(fixed: int, separator_id: int) -> str:
    return (
        f"looks for <sep> as a fixed id, {fixed}, not separator_id ({separator_id} here): use "
        f"the argument"
    )


def _name_a_fixed_separator(failures: list, outcomes: list) -> None:
    """outcomes: (name, separator_id, index of its failure or None) per case. Where the answer
    is right in exactly the cases of one separator id and its value is wrong in every other
    case, it looks for that id whatever separator_id says: name that in each of those cases
    (what it returns there depends on how it finds <sep>: NaN where no position is scored, the
    whole sequence where a missing <sep> is taken to be at position 0)."""
    right = {separator_id for _, separator_id, failure in outcomes if failure is None}
    wrong = [
        (name, separator_id, failure)
        for name, separator_id, failure in outcomes
        if failure is not None
    ]
    if len(right) != 1 or not wrong or any(separator_id in right for _, separator_id, _ in wrong):
        return
    if not all(_a_wrong_value(failures[failure], name) for name, _, failure in wrong):
        return
    (fixed,) = right
    for name, separator_id, failure in wrong:
        _renamed(failures, failure, name, _fixed_separator(fixed, separator_id))


def answer_loss_cases() -> list[tuple[str, torch.Tensor, torch.Tensor, int]]:
    """(name, logits (B, T - 1, V), sequences (B, T), separator_id) for every case."""
    generator = torch.Generator().manual_seed(122)

    def ids(length, vocab, separator_id):
        drawn = torch.randint(3, vocab - 1, (length,), generator=generator).tolist()
        return [token + (token == separator_id) for token in drawn]  # never <sep> itself

    def case(name, lengths, separator_id, dtype=torch.float32, vocab=None, shift=0.0, gap=0.0):
        vocab = separator_id + 1 if vocab is None else vocab
        english = [ids(e, vocab, separator_id) for e, _ in lengths]
        french = [ids(f, vocab, separator_id) for _, f in lengths]
        sequences = build_sequences(english, french, separator_id)
        shape = (sequences.shape[0], sequences.shape[1] - 1, vocab)
        logits = torch.randn(shape, generator=generator, dtype=torch.float64) * 2 + shift
        if gap:  # row 0's first French token, gap below the largest logit of its position
            t, target = len(english[0]) + 1, sequences[0, len(english[0]) + 2]
            logits[0, t, target] = logits[0, t].max() - gap
        return name, logits.to(dtype), sequences, separator_id

    return [
        case(
            "three rows of different lengths, padded; <sep> = 8000", [(3, 4), (5, 3), (1, 2)], 8000
        ),
        case("<sep> = 11 (not 8000), two rows", [(2, 3), (4, 2)], 11),
        case("a row whose answer is only <eos>", [(3, 0), (2, 2)], 9),
        case("float64, <sep> = 9", [(4, 3), (2, 5), (3, 1)], 9, torch.float64),
        case(
            "<sep> = 11 in a vocabulary of 20: ids above <sep>",
            [(3, 2), (1, 5), (4, 1)],
            11,
            vocab=20,
        ),
        case(
            "logits about 95, where exp overflows float32 (e^89 is its largest), three rows of "
            "different lengths; <sep> = 9",
            [(3, 4), (5, 3), (1, 2)],
            9,
            shift=95.0,
        ),
        case(
            "row 0's first French token has a logit 110 below its position's largest: its "
            "probability, e^-110, is 0 in float32, its log-probability about -110; three rows "
            "of different lengths, padded, one answer of 12 tokens; <sep> = 9",
            [(3, 4), (5, 11), (1, 2)],
            9,
            gap=110.0,
        ),
    ]


@exercise_checker
def check_answer_loss(learner_loss: Callable) -> bool:
    """learner_loss(logits, sequences, separator_id) -> a 0-d tensor: sequences (B, T) int64,
    rows <bos> English <sep> French <eos> padded on the right with <pad> (id 0; <bos> is 1,
    <eos> 2); logits (B, T - 1, V) float32 or float64, position t's prediction of token t + 1,
    some as large as 100 (where exp overflows float32). The mean cross-entropy over the
    positions whose target comes after <sep> (every French token and the closing <eos>), pads
    left out, in the logits' dtype. Its gradient reaches the logits of those positions only.
    The inputs are left as they were (no in-place operation on them, even one that changes no
    value, their requires_grad as it came, no hook left on them, and no backward pass inside,
    which would fill the .grad of the tensors the logits come from).
    Without helpers.decoder_only's loss_targets and training_loss (a call to either is refused).
    Each call returns within 5 s and leaves torch's grad mode, default dtype, random generator,
    anomaly detection, deterministic-algorithms setting, thread count and module hooks as they
    were."""
    failures, passed, answers_in_time = [], 0, TimedAnswers(learner_loss)
    outcomes = []  # (name, separator_id, index of its failure or None)
    nan_failures = []  # (name, index of its failure) where the answer is NaN
    for name, logits, sequences, separator_id in answer_loss_cases():
        seen = {}

        def learner(lg, seq, separator_id=separator_id, seen=seen):
            seen["got"] = answers_in_time(lg, seq, separator_id)
            seen["gradient"] = _gradient(seen["got"], lg)
            return seen["got"]

        def reference(lg, seq, separator_id=separator_id):
            return _answer_loss(lg, seq, separator_id)

        before = len(failures)
        right = run_case(
            name,
            learner,
            (logits, sequences),
            reference,
            failures,
            atol=1e-5 if logits.dtype == torch.float32 else 1e-10,
            hint="the mean cross-entropy over the positions whose target comes after <sep>",
            mistakes=wrong_only(
                _answer_mistakes(logits, sequences, separator_id),
                _answer_loss(logits, sequences, separator_id),
            ),
            forbidden={
                "helpers.decoder_only.loss_targets": loss_targets,
                "helpers.decoder_only.training_loss": training_loss,
            },
            names=("logits", "sequences"),
        )
        passed += right
        outcomes.append((name, separator_id, None if right else len(failures) - 1))
        if len(failures) > before and failures[-1].startswith(f"{name}: shape ("):
            failures[-1] += " (one number: the mean over every scored position of the batch)"
        if len(failures) > before and failures[-1].startswith(f"{name}: the values are right"):
            _name_an_unscored_position(failures, seen.get("gradient"), sequences, separator_id)
        if len(failures) > before and failures[-1].startswith(f"{name}: NaN at index ()"):
            nan_failures.append((name, len(failures) - 1))
    _name_a_nan(failures, nan_failures, len(outcomes))
    _name_a_fixed_separator(failures, outcomes)
    return report(failures, passed)


def _gradient(loss: object, logits: torch.Tensor) -> torch.Tensor | None:
    """d loss / d logits, the graph kept for the checker's own gradient check; None where there
    is none."""
    if not (isinstance(loss, torch.Tensor) and loss.requires_grad and loss.numel() == 1):
        return None
    try:
        (gradient,) = torch.autograd.grad(loss.sum(), logits, retain_graph=True, allow_unused=True)
    except Exception:  # a graph the learner built in any way; the checker's own check says why
        return None
    return gradient


def _name_an_unscored_position(failures: list, gradient, sequences, separator_id) -> None:
    """Add the first position the loss does not score that the gradient reaches anyway."""
    if gradient is None:
        return
    scored = loss_targets(sequences, separator_id, "answer") != PAD_ID  # (B, T - 1)
    reached = (gradient != 0).any(-1) & ~scored
    if reached.any():
        b, t = reached.nonzero()[0].tolist()
        target = sequences[b, t + 1].item()
        what = (
            "<pad>"
            if target == PAD_ID
            else "<sep>"
            if target == separator_id
            else "a token of the English"
        )
        failures[-1] += (
            f" (position {t} of row {b}, whose target is {what} and is not scored, receives "
            f"gradient: its logits must not move the loss at all. A term that adds nothing to "
            f"the value but is computed from them, such as s - s.detach() with s = "
            f"logits.sum(), still passes them gradient)"
        )
        return
    row_sums = gradient.double().sum(-1)[:, : scored.shape[1]][scored]  # one per scored position
    if row_sums.numel() and row_sums.abs().max() > 1e-6:
        failures[-1] += (
            " (the gradient at a scored position does not sum to 0 over the vocabulary, as "
            "softmax(logits) - one_hot(target) does: part of the loss is cut from the graph, "
            "such as a detached log-sum-exp, the normaliser of the log-probabilities; let the "
            "gradient flow through all of it)"
        )
