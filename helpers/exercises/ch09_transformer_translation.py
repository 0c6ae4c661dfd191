"""Chapter 09's exercises: the training loss and the decoding of a Transformer translator.

1. check_smoothing_over_writable_tokens: label smoothing that spreads epsilon over the tokens a
   translation can contain, not over <pad> and <bos>; averaged over the real target tokens.
2. check_beam_step: one step of batched beam search, from the beams' scores and the next
   token's log-probabilities to the k best extensions of each sentence, best first.
3. check_gnmt_length_penalty: the length penalty of Google's NMT system, ((5 + L) / 6) ** alpha.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.exercises.framework import Refused, exercise_checker, report, run_case, wrong_only
from helpers.training import sequence_cross_entropy

__all__ = ["check_beam_step", "check_gnmt_length_penalty", "check_smoothing_over_writable_tokens"]


# 1. Label smoothing over the writable tokens


def _smoothed_target(targets, vocab, epsilon, spread_over, dtype):
    """q (B, T, V): 1 - epsilon on the target plus epsilon spread evenly over `spread_over`
    (B, T, V) bool."""
    one_hot = F.one_hot(targets, vocab).to(dtype)  # (B, T, V)
    share = spread_over.to(dtype) / spread_over.sum(-1, keepdim=True)  # (B, T, V)
    return (1 - epsilon) * one_hot + epsilon * share


def _writable(never_written, shape) -> torch.Tensor:
    writable = torch.ones(shape, dtype=torch.bool)  # (B, T, V)
    writable[..., list(never_written)] = False
    return writable


def _smoothed_losses(logits, targets, epsilon, spread_over):
    """The cross-entropy of each position against its smoothed target, (B, T)."""
    q = _smoothed_target(targets, logits.shape[-1], epsilon, spread_over, logits.dtype)
    return -(q * logits.log_softmax(-1)).sum(-1)


def _epsilon_over_all_v_on_writable(logits, targets, epsilon, writable):
    """(B, T): the mistake of putting epsilon / V (not / writable count) on each writable token."""
    vocab = logits.shape[-1]
    log_probs = logits.log_softmax(-1)
    target = writable * (epsilon / vocab)
    target = target + (1 - epsilon) * F.one_hot(targets, vocab).to(log_probs.dtype)
    return -(target * log_probs).sum(-1)


def _smoothing(logits, targets, pad_id, epsilon, never_written):
    per_position = _smoothed_losses(
        logits, targets, epsilon, _writable(never_written, logits.shape)
    )  # (B, T)
    real = targets != pad_id
    return per_position[real].mean()


@exercise_checker
def check_smoothing_over_writable_tokens(learner_loss: Callable) -> bool:
    """learner_loss(logits (B, T, V), targets (B, T), pad_id, epsilon, never_written) ->
    the loss, a scalar tensor. never_written is a list of token ids a translation never
    contains (such as <pad> and <bos>); a target is never one of them, except at the pad
    positions (targets == pad_id), which count for nothing. At every other position the target
    distribution q puts 1 - epsilon on the target token and spreads epsilon evenly over the
    V - len(never_written) tokens that are not in never_written (the target among them); the
    loss is -sum_v q_v log softmax(logits)_v, averaged over the non-pad positions. With
    never_written = [] it equals torch's label smoothing. Without
    torch.nn.functional.cross_entropy (nn.CrossEntropyLoss calls it) or
    helpers.training.sequence_cross_entropy; log_softmax is allowed."""
    forbidden = {
        "torch.nn.functional.cross_entropy": F.cross_entropy,
        "helpers.training.sequence_cross_entropy": sequence_cross_entropy,
    }
    cases = [
        # name, seed, targets, V, pad_id, epsilon, never_written, dtype
        (
            "pad 0, never_written [0, 1], a sentence of pads only",
            21,
            [[4, 7, 2, 9, 0, 0], [0, 0, 0, 0, 0, 0], [5, 3, 8, 2, 9, 6], [9, 2, 0, 0, 0, 0]],
            10,
            0,
            0.1,
            [0, 1],
            torch.float32,
        ),
        (
            "never_written [] (torch's label smoothing)",
            22,
            [[3, 6, 2, 0], [1, 4, 5, 2]],
            8,
            0,
            0.2,
            [],
            torch.float32,
        ),
        (
            "float64, pad 3, never_written [5, 3, 0]",
            23,
            [[1, 6, 2, 3, 3], [4, 2, 6, 1, 3], [6, 1, 4, 2, 6]],
            7,
            3,
            0.3,
            [5, 3, 0],
            torch.float64,
        ),
    ]
    failures, passed = [], 0
    for name, seed, targets, vocab, pad_id, epsilon, never, dtype in cases:
        generator = torch.Generator().manual_seed(seed)
        targets = torch.tensor(targets)
        logits = (torch.randn(*targets.shape, vocab, generator=generator) * 2).to(dtype)
        real = targets != pad_id
        writable = _writable(never, logits.shape)
        others = targets[..., None] != torch.arange(vocab)  # (B, T, V): all but the target
        per_position = _smoothed_losses(logits, targets, epsilon, writable)  # (B, T)
        plain = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")
        plain = plain.view(targets.shape)
        mistakes = {
            "epsilon is spread over all V tokens, <pad> and <bos> too (torch's "
            "label_smoothing): spread it over the V - len(never_written) writable tokens only": (
                F.cross_entropy(
                    logits.flatten(0, 1),
                    targets.flatten(),
                    ignore_index=pad_id,
                    label_smoothing=epsilon,
                )
            ),
            "no smoothing: this is the plain cross-entropy of the targets": plain[real].mean(),
            "epsilon is spread over the writable tokens other than the target (as the Annotated "
            "Transformer's LabelSmoothing does, dividing by V - 2): the target is one of the "
            "writable tokens and gets its share too": _smoothed_losses(
                logits, targets, epsilon, writable & others
            )[real].mean(),
            "epsilon is spread over the V - 1 tokens other than the target, epsilon / (V - 1) "
            "each (fairseq's label_smoothed_nll_loss): here it goes to the writable tokens, "
            "the target among them": _smoothed_losses(logits, targets, epsilon, others)[
                real
            ].mean(),
            "the pads were counted in the mean: divide by the number of non-pad positions": (
                (per_position * real).sum() / real.numel()
            ),
            "the pad positions were counted as targets: leave them out of the loss"
            + (f" (pad_id is {pad_id} here: was it taken to be 0?)" if pad_id else ""): (
                per_position.mean()
            ),
            "the sum over the positions: average it over the non-pad positions": (
                per_position[real].sum()
            ),
            "epsilon / V on each writable token, so the target no longer sums to 1: divide "
            "epsilon by V - len(never_written), the number of writable tokens": (
                _epsilon_over_all_v_on_writable(logits, targets, epsilon, writable)[real].mean()
            ),
        }

        def learner(logits, targets, never=never, pad_id=pad_id, epsilon=epsilon):
            given = list(never)
            got = learner_loss(logits, targets, pad_id, epsilon, given)
            if given != never:
                raise Refused(
                    f"changes its input `never_written` in place (it was {never}, it became "
                    f"{given}): make a new list or tensor instead"
                )
            return got

        passed += run_case(
            f"{name}, epsilon {epsilon}",
            learner,
            (logits, targets),
            lambda lg, tg, never=never, pad_id=pad_id, epsilon=epsilon: _smoothing(
                lg, tg, pad_id, epsilon, never
            ),
            failures,
            atol=1e-5,
            hint="q = (1 - epsilon) on the target + epsilon / (V - len(never_written)) on each "
            "token not in never_written; -sum q log_softmax(logits) at each non-pad position, "
            "then their mean, one number",
            mistakes=wrong_only(mistakes, _smoothing(logits, targets, pad_id, epsilon, never)),
            forbidden=forbidden,
            names=("logits", "targets"),
        )
    return report(failures, passed)


# 2. One step of beam search

_PARTS = ("new_scores", "beams", "tokens")


def _candidates(
    scores, log_probs, ended, pad_id, add_previous=True, stop_ended=True, pad_is_free=True
):
    """The score of every extension (B, k, V)."""
    if stop_ended:
        only_pad = torch.arange(log_probs.shape[-1]) == pad_id  # (V,)
        # an ended hypothesis can only add a pad, at no cost
        after_end = torch.where(only_pad, 0.0 if pad_is_free else log_probs, float("-inf"))
        log_probs = torch.where(ended[..., None], after_end, log_probs)
    return scores[..., None] + log_probs if add_previous else log_probs


def _best(candidates, k):
    """The k best of each row's k * V candidates: (scores, flat indices), best first."""
    return candidates.flatten(1).topk(k, dim=-1)


def _beam_step(scores, log_probs, ended, pad_id, **how):
    vocab, k = log_probs.shape[-1], scores.shape[-1]
    new_scores, chosen = _best(_candidates(scores, log_probs, ended, pad_id, **how), k)
    return new_scores, chosen // vocab, chosen % vocab  # (B, k) each


def _best_of_the_whole_batch(candidates, k):
    """The mistake of one top-k over every sentence's candidates together, (B, k) each."""
    batch, vocab = candidates.shape[0], candidates.shape[-1]
    new_scores, chosen = candidates.flatten().topk(batch * k)
    return (
        new_scores.view(batch, k),
        (chosen // vocab).view(batch, k),
        (chosen % vocab).view(batch, k),
    )


def _best_with(scores, log_probs, k, vocab):
    new_scores, chosen = _best(scores[..., None] + log_probs, k)
    return new_scores, chosen // vocab, chosen % vocab


def _reorder(answer, order):
    return tuple(part.gather(1, order) for part in answer)


def _beam_mistakes(scores, log_probs, ended, pad_id):
    """{diagnosis: (new_scores, beams, tokens)} of the typical mistakes."""
    vocab, k = log_probs.shape[-1], scores.shape[-1]
    right = _beam_step(scores, log_probs, ended, pad_id)
    candidates = _candidates(scores, log_probs, ended, pad_id)  # (B, k, V)
    top_scores, top_tokens = candidates.max(-1)  # (B, k): the best of each hypothesis
    each = (top_scores, torch.arange(k).expand_as(top_tokens), top_tokens)
    flat_scores, flat = _best(candidates, k)
    by_index = flat.argsort(-1)  # the k best in the order of their flat index
    mistakes = {
        "the best extension of each hypothesis: keep the k best of all k * V candidates of "
        "the sentence, several may extend the same hypothesis": each,
        "the best extension of each hypothesis, sorted: keep the k best of all k * V "
        "candidates of the sentence, several may extend the same hypothesis": _reorder(
            each, top_scores.argsort(-1, descending=True)
        ),
        "the previous scores were not added: a candidate's score is its hypothesis's score "
        "plus the token's log-probability": _beam_step(
            scores, log_probs, ended, pad_id, add_previous=False
        ),
        "an ended hypothesis was extended like a live one: it may only add pad_id, at no "
        "cost": _beam_step(scores, log_probs, ended, pad_id, stop_ended=False),
        "an ended hypothesis was given every token at no cost: only pad_id (the others -inf), "
        "or copies of it fill the beam": _best_with(
            scores, torch.where(ended[..., None], 0.0, log_probs), k, vocab
        ),
        "tokens are flat indices into the k * V candidates: the token is the index % V": (
            flat_scores,
            flat // vocab,
            flat,
        ),
        "beams are flat indices into the k * V candidates: the hypothesis is the index // V": (
            flat_scores,
            flat,
            flat % vocab,
        ),
        "not sorted best first (topk(..., sorted=False), or the candidates in the order of "
        "their index): sort each sentence's k best, best first": _reorder(right, by_index),
        "sorted worst first: the best comes first (descending order)": _reorder(
            right, torch.arange(k - 1, -1, -1).expand_as(flat)
        ),
        "the ended hypotheses were dropped (their score set to -inf): an ended hypothesis "
        "stays in the beam with its score, adding pad_id at no cost": _best_with(
            scores.masked_fill(ended, float("-inf")), log_probs, k, vocab
        ),
        "an ended hypothesis paid the log-probability of its pad: it adds pad_id at no cost, "
        "its score stays the same": _beam_step(scores, log_probs, ended, pad_id, pad_is_free=False),
        "`//` and `%` are swapped: the hypothesis is the flat index // V, the token the flat "
        "index % V": (flat_scores, flat % vocab, flat // vocab),
        "one top-k over the whole batch mixes the sentences: each sentence keeps the k best of "
        "its own k * V candidates (flatten (B, k, V) to (B, k * V), then topk(k, dim=-1))": (
            _best_of_the_whole_batch(candidates, k)
        ),
    }
    if pad_id != 0:
        mistakes[
            f"the pad id is taken to be 0, but here it is {pad_id}: an ended hypothesis adds "
            f"pad_id (the argument), at no cost"
        ] = _beam_step(scores, log_probs, ended, 0)
    return mistakes


def _beam_inputs(seed, batch, k, vocab, ended_at=(), unfilled=()):
    """Scores (B, k) and log-probabilities (B, k, V) in float64, ended (B, k) bool. Rows in
    `unfilled` are a beam at its first step: one live hypothesis with score 0, the others
    -inf. No two candidates are equal."""
    generator = torch.Generator().manual_seed(seed)
    scores = -torch.rand(batch, k, generator=generator, dtype=torch.float64) * 6
    for row in unfilled:
        scores[row] = float("-inf")
        scores[row, 0] = 0.0
    logits = torch.randn(batch, k, vocab, generator=generator, dtype=torch.float64) * 2
    ended = torch.zeros(batch, k, dtype=torch.bool)
    for row, beam in ended_at:
        ended[row, beam] = True
    return scores, logits.log_softmax(-1), ended


def _three_tensors(got, batch: int, k: int) -> None:
    """Refuse an answer that is not three (B, k) tensors, scores first, then int64 indices."""
    if isinstance(got, torch.Tensor):
        kind = "complex " if got.is_complex() else "meta " if got.is_meta else ""
        raise Refused(
            f"returned one {kind}tensor of shape {tuple(got.shape)}, expected a tuple of three "
            f"tensors (new_scores, beams, tokens), each of shape (B, k) = {(batch, k)}"
        )
    if len(got) != 3:
        raise Refused(f"returned {len(got)} items, expected three: (new_scores, beams, tokens)")
    for name, tensor in zip(_PARTS, got, strict=True):
        if not isinstance(tensor, torch.Tensor):
            raise Refused(f"{name} is a {type(tensor).__name__}, expected a tensor")
        if tuple(tensor.shape) != (batch, k):
            whole_batch = tensor.numel() in (k, batch * k) and tensor.dim() == 1
            raise Refused(
                f"{name} has shape {tuple(tensor.shape)}, expected (B, k) = {(batch, k)}"
                + (
                    " (one top-k over the whole batch? each sentence keeps the k best of its own "
                    "k * V candidates: flatten (B, k, V) to (B, k * V), then topk(k, dim=-1))"
                    if whole_batch
                    else ""
                )
            )
        if name != "new_scores" and tensor.dtype != torch.int64:
            raise Refused(
                f"{name} has dtype {tensor.dtype}, expected torch.int64: indices, as topk "
                f"returns them and // and % keep them (the answer is (new_scores, beams, "
                f"tokens), in that order)"
            )


def _beam_part(learner_step: Callable, part: int | None, batch: int, k: int) -> Callable:
    """The learner's step answering only one of its three tensors (so that run_case can check
    it), or, with part None, a zero once the answer is three (B, k) tensors."""

    def learner(*args):
        got = learner_step(*args)
        if not isinstance(got, tuple | list | torch.Tensor):
            return got  # None, a string...: run_case names what it is
        _three_tensors(got, batch, k)
        return torch.zeros(()) if part is None else got[part]

    return learner


@exercise_checker
def check_beam_step(learner_step: Callable) -> bool:
    """learner_step(scores (B, k), log_probs (B, k, V), ended (B, k), pad_id) ->
    (new_scores (B, k), beams (B, k), tokens (B, k)): one step of batched beam search.
    scores and log_probs are float64, ended bool, beams and tokens int64. Hypothesis b of
    sentence i may be extended by any token v, with score scores[i, b] + log_probs[i, b, v];
    an ended hypothesis (ended[i, b]) only by pad_id, at no cost (its score stays the same). Of
    the k * V candidates of each sentence keep the k best, best first: new_scores their scores,
    beams the hypothesis each extends, tokens the token it adds. A score of -inf is a place in
    the beam not filled yet (at the first step only hypothesis 0 is live). Gradients flow from
    new_scores to scores and log_probs. pad_id is a Python int, not necessarily 0 nor the
    smallest id; V > k, so every sentence has at least k candidates with a finite score."""
    cases = [
        # name, seed, B, k, V, pad_id, ended (row, beam), unfilled rows
        ("B=2, k=3, V=7, hypothesis 1 of sentence 0 has ended", 31, 2, 3, 7, 0, ((0, 1),), ()),
        ("B=1, k=2, V=5, none ended", 32, 1, 2, 5, 0, (), ()),
        (
            "B=3, k=4, V=9, sentences 0 and 2 at their first step (scores 0, -inf, -inf, "
            "-inf), hypothesis 2 of sentence 1 has ended",
            33,
            3,
            4,
            9,
            0,
            ((1, 2),),
            (0, 2),
        ),
        (
            "B=2, k=3, V=8, pad_id 5, hypothesis 1 of sentence 0 and 0 of sentence 1 have ended",
            34,
            2,
            3,
            8,
            5,
            ((0, 1), (1, 0)),
            (),
        ),
        (
            "B=2, k=3, V=6, pad_id 5 (the largest id), hypothesis 2 of each sentence has ended",
            35,
            2,
            3,
            6,
            5,
            ((0, 2), (1, 2)),
            (),
        ),
    ]
    names = ("scores", "log_probs", "ended", "pad_id")
    failures, passed = [], 0
    for name, seed, batch, k, vocab, pad_id, ended_at, unfilled in cases:
        scores, log_probs, ended = _beam_inputs(seed, batch, k, vocab, ended_at, unfilled)
        args = (scores, log_probs, ended, pad_id)
        mistakes = _beam_mistakes(*args)
        right = _beam_step(*args)
        ok = run_case(  # the shape of the answer, in-place changes
            name,
            _beam_part(learner_step, None, batch, k),
            args,
            lambda *a: torch.zeros(()),
            failures,
            names=names,
        )
        for part, part_name in enumerate(_PARTS):
            if not ok:
                break
            ok = run_case(
                f"{name}: {part_name}",
                _beam_part(learner_step, part, batch, k),
                args,
                lambda *a, part=part: _beam_step(*a)[part],
                failures,
                atol=1e-9,
                hint="candidates (B, k, V) = scores[..., None] + log_probs (an ended "
                "hypothesis: 0 at pad_id, -inf elsewhere), flattened to (B, k * V); topk(k); "
                "beam = index // V, token = index % V",
                mistakes=wrong_only(
                    {diagnosis: answer[part] for diagnosis, answer in mistakes.items()},
                    right[part],
                ),
                names=names,
            )
        passed += ok
    return report(failures, passed)


# 3. GNMT's length penalty


def _lengths(tokens, pad_id):
    return (tokens != pad_id).sum(-1)  # (B, k): the <eos> counts, the pads do not


def _gnmt(scores, tokens, pad_id, alpha):
    penalty = ((5 + _lengths(tokens, pad_id).to(scores.dtype)) / 6) ** alpha  # (B, k)
    return scores / penalty


def _hypotheses(seed, lengths, steps, pad_id, eos_id, vocab, dtype):
    """Scores (B, k) < 0 and tokens (B, k, steps): each hypothesis its length in tokens, the
    last of them <eos>, then pads."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(lengths)  # (B, k)
    words = [v for v in range(vocab) if v not in (pad_id, eos_id)]
    tokens = torch.tensor(words)[
        torch.randint(len(words), (*lengths.shape, steps), generator=generator)
    ]
    position = torch.arange(steps)
    tokens = torch.where(position == lengths[..., None] - 1, eos_id, tokens)
    tokens = torch.where(position >= lengths[..., None], pad_id, tokens)
    scores = -(lengths * (0.5 + torch.rand(lengths.shape, generator=generator))).to(dtype)
    return scores, tokens


@exercise_checker
def check_gnmt_length_penalty(learner_penalty: Callable) -> bool:
    """learner_penalty(scores (B, k), tokens (B, k, T), pad_id, alpha) -> (B, k): each
    hypothesis's score divided by GNMT's length penalty ((5 + L) / 6) ** alpha (Wu et al.,
    2016), where L is the number of its tokens that are not pad_id (its <eos> counts). Keep
    the scores' dtype; alpha = 0 gives the scores back unchanged. Gradients flow to scores."""
    cases = [
        # name, seed, lengths (B, k), T, pad_id, alpha, dtype
        ("alpha 0.6, B=2, k=3", 41, [[3, 6, 1], [5, 2, 4]], 7, 0, 0.6, torch.float32),
        ("alpha 1.0, pad_id 2, float64", 42, [[4, 1, 8, 2]], 8, 2, 1.0, torch.float64),
        ("alpha 0: the scores unchanged", 43, [[2, 5], [3, 1]], 6, 0, 0.0, torch.float32),
    ]
    failures, passed = [], 0
    for name, seed, lengths, steps, pad_id, alpha, dtype in cases:
        eos_id = 3 if pad_id != 3 else 4
        scores, tokens = _hypotheses(seed, lengths, steps, pad_id, eos_id, 12, dtype)
        length = _lengths(tokens, pad_id).to(dtype)  # (B, k)
        gnmt = ((5 + length) / 6) ** alpha
        mistakes = {
            "the chapter's penalty L ** alpha: GNMT's is ((5 + L) / 6) ** alpha": (
                scores / length**alpha
            ),
            "the pads were counted: L is the number of tokens that are not pad_id, not the "
            "padded length T": scores / ((5 + steps) / 6) ** alpha,
            "(5 + L) ** alpha / 6: the division by 6 belongs inside the power, "
            "((5 + L) / 6) ** alpha": scores / ((5 + length) ** alpha / 6),
            "alpha is ignored: raise (5 + L) / 6 to the power alpha": scores / ((5 + length) / 6),
            "multiplied by the penalty: divide the scores by it": scores * gnmt,
            "L leaves out the <eos>: count every token that is not pad_id": (
                scores / ((4 + length) / 6) ** alpha
            ),
        }
        passed += run_case(
            name,
            lambda sc, tk, pad_id=pad_id, alpha=alpha: learner_penalty(sc, tk, pad_id, alpha),
            (scores, tokens),
            lambda sc, tk, pad_id=pad_id, alpha=alpha: _gnmt(sc, tk, pad_id, alpha),
            failures,
            atol=1e-5,
            hint="L = (tokens != pad_id).sum(-1); scores / ((5 + L) / 6) ** alpha",
            mistakes=wrong_only(mistakes, _gnmt(scores, tokens, pad_id, alpha)),
            names=("scores", "tokens"),
        )
    return report(failures, passed)
