"""Chapter 08's exercises: the pieces of an RNN translator that attention changes or needs.

1. check_encoder_summary: the bottleneck model's fixed vector, from a padded batch of
   bidirectional encoder states.
2. check_sentence_losses: one loss per sentence, over its real target tokens only.
3. check_context_vector: one step of Bahdanau attention, from the decoder state to the context.
"""

from collections.abc import Callable

import torch
import torch.nn.functional as F

from helpers.attention import AdditiveAttention, masked_softmax
from helpers.exercises.framework import Refused, exercise_checker, report, run_case

__all__ = ["check_context_vector", "check_encoder_summary", "check_sentence_losses"]

FORBIDDEN = {
    "AdditiveAttention": AdditiveAttention.forward,
    "helpers.attention.masked_softmax": masked_softmax,
}
STATE_NAMES = ("state", "encoder_states", "W_q", "W_k", "w_v")


def _step_inputs(seed: int, lengths: tuple = (6, 2, 1), hidden: int = 4, keys: int = 8):
    """A decoder state (B, h), encoder states (B, S, k) with something in the pad positions
    (so that ignoring the mask shows), lengths (B,) and the attention's weights."""
    generator = torch.Generator().manual_seed(seed)
    attention = 5

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    lengths = torch.tensor(lengths)
    batch, length = len(lengths), int(lengths.max()) + 1  # the longest has a pad too
    return {
        "state": draw(batch, hidden),
        "encoder_states": draw(batch, length, keys),
        "lengths": lengths,
        "W_q": draw(attention, hidden) / hidden**0.5,
        "W_k": draw(attention, keys) / keys**0.5,
        "w_v": draw(attention),
    }


def _scores(state, encoder_states, W_q, W_k, w_v):
    queries = (state @ W_q.T)[:, None, :]  # (B, 1, a)
    keys = encoder_states @ W_k.T  # (B, S, a)
    return torch.tanh(queries + keys) @ w_v  # (B, S)


def _alignment(scores, lengths):
    return masked_softmax(scores[:, None, :], lengths)[:, 0]  # (B, S)


def _summary(states, lengths):
    half = states.shape[-1] // 2
    last = states[torch.arange(len(states)), lengths - 1, :half]  # left to right: its end
    return torch.cat([last, states[:, 0, half:]], dim=-1)  # right to left: the start


def _summary_mistakes(states: torch.Tensor, lengths: torch.Tensor) -> dict:
    """{diagnosis: what that mistake returns} for encoder_summary."""
    half = states.shape[-1] // 2
    rows = torch.arange(len(lengths))
    end = lengths - 1
    real = (torch.arange(states.shape[1]) < lengths[:, None]).to(states.dtype)  # (B, S)
    mistakes = {
        "the last position is a pad for a shorter sentence: take each sentence's last real "
        "token (lengths - 1)": torch.cat([states[:, -1, :half], states[:, 0, half:]], -1),
        "each direction ends at a different place: the right-to-left GRU ends at position "
        "0": states[rows, end],
        "the halves are swapped: the first half of each state is the left-to-right GRU's": (
            torch.cat([states[:, 0, half:], states[rows, end, :half]], dim=-1)
        ),
        "the directions are swapped: the left-to-right GRU (the first half) ends at the last "
        "real token, the right-to-left GRU (the second half) at position 0": torch.cat(
            [states[:, 0, :half], states[rows, end, half:]], dim=-1
        ),
        "a mean over the positions: the summary is each GRU's state after its last step, not "
        "an average of the states": (real[:, :, None] * states).sum(1) / lengths[:, None],
        "a mean over all the positions, pads included: the summary is each GRU's state after "
        "its last step, not an average": states.mean(1),
    }
    if int(lengths.max()) < states.shape[1]:  # otherwise position `lengths` does not exist
        mistakes[
            "position `lengths` is one past the last real token (a pad): the last real token "
            "is at lengths - 1"
        ] = torch.cat([states[rows, lengths, :half], states[:, 0, half:]], dim=-1)
    return mistakes


def _naming_index_errors(learner_summary: Callable) -> Callable:
    """The learner's function, with an IndexError explained: the usual cause is a position
    `lengths`, one past the end of a sentence that fills the whole padded length."""

    def learner(states, lengths):
        try:
            return learner_summary(states, lengths)
        except IndexError as error:
            raise Refused(
                f"your function raised IndexError: {error} (the longest sentence here fills "
                f"all {states.shape[1]} positions, so there is no position `lengths` for it: "
                f"its last real token is at lengths - 1)"
            ) from error

    return learner


@exercise_checker
def check_encoder_summary(learner_summary: Callable) -> bool:
    """learner_summary(states (B, S, 2h), lengths (B,)) -> (B, 2h): the left-to-right half of
    each sentence's state at its last real token, joined with the right-to-left half of its
    state at position 0. The pads hold numbers; lengths is int64, 1 <= lengths <= S, and the
    longest sentence may fill all S positions."""
    failures, passed = [], 0
    for seed, lengths in ((7, torch.tensor([6, 2, 1])), (8, torch.tensor([3, 5]))):
        generator = torch.Generator().manual_seed(seed)
        states = torch.randn(len(lengths), 6, 8, generator=generator)  # pads hold numbers too
        passed += run_case(
            f"lengths {lengths.tolist()}, S = {states.shape[1]}",
            _naming_index_errors(learner_summary),
            (states, lengths),
            _summary,
            failures,
            hint="left-to-right half at position lengths - 1, right-to-left half at position 0",
            mistakes=_summary_mistakes(states, lengths),
            names=("states", "lengths"),
        )
    return report(failures, passed)


def _sentence_losses(logits, targets, pad_id):
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    real = targets != pad_id
    return (per_token * real).sum(1) / real.sum(1)


def _loss_mistakes(logits: torch.Tensor, targets: torch.Tensor, pad_id: int) -> dict:
    """{diagnosis: what that mistake returns} for sentence_losses."""
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    real = targets != pad_id
    mistakes = {
        "the pads were counted: leave them out of the loss": per_token.mean(1),
        "divided by the padded length: divide by each sentence's number of real tokens": (
            (per_token * real).sum(1) / targets.shape[1]
        ),
        "one loss for the whole batch: return one per sentence, shape (B,)": (
            per_token[real].mean().expand(len(targets))
        ),
    }
    if pad_id != 0:
        hard_coded = targets != 0  # targets > 0 too: no id is negative
        mistakes[
            f"the pad id is taken to be 0 (targets != 0 or targets > 0), but here it is "
            f"{pad_id}: compare with the pad_id argument"
        ] = (per_token * hard_coded).sum(1) / hard_coded.sum(1)
    return mistakes


@exercise_checker
def check_sentence_losses(learner_losses: Callable) -> bool:
    """learner_losses(logits (B, T, V) float32, targets (B, T) int64, pad_id) -> (B,): each
    sentence's mean cross-entropy over its real target tokens (targets != pad_id); pads count
    for nothing. pad_id is a Python int and need not be 0 nor the smallest id (a real token
    may have id 0); every sentence has at least one real token."""
    failures, passed = [], 0
    cases = (  # seed, pad_id, targets
        (9, 0, [[4, 7, 2, 0, 0], [5, 6, 3, 8, 2], [9, 2, 0, 0, 0]]),
        (10, 0, [[3, 2, 0], [1, 4, 2]]),
        (11, 3, [[0, 5, 2, 3, 3], [4, 0, 1, 2, 3], [7, 2, 3, 3, 3]]),  # 0 is a real token
        (12, 9, [[1, 0, 2, 9], [5, 6, 7, 2]]),  # the pad is the largest id
    )
    for seed, pad, targets in cases:
        targets = torch.tensor(targets)
        generator = torch.Generator().manual_seed(seed)
        logits = torch.randn(*targets.shape, 10, generator=generator) * 2
        passed += run_case(
            f"targets {tuple(targets.shape)}, pad_id {pad}",
            lambda lg, tg, pad=pad: learner_losses(lg, tg, pad),
            (logits, targets),
            lambda lg, tg, pad=pad: _sentence_losses(lg, tg, pad),
            failures,
            atol=1e-5,
            hint=(
                "per-token cross-entropy (reduction='none'), zero where targets == pad_id, "
                "then each row's sum divided by its number of real tokens"
            ),
            mistakes=_loss_mistakes(logits, targets, pad),
            names=("logits", "targets"),
        )
    return report(failures, passed)


def _context(state, encoder_states, lengths, W_q, W_k, w_v):
    weights = _alignment(_scores(state, encoder_states, W_q, W_k, w_v), lengths)  # (B, S)
    return (weights[:, :, None] * encoder_states).sum(1)  # (B, k)


def _context_mistakes(given: dict) -> dict:
    """{diagnosis: what that mistake returns} for context_vector."""
    state, states, lengths = given["state"], given["encoder_states"], given["lengths"]
    W_q, W_k, w_v = given["W_q"], given["W_k"], given["w_v"]
    positions = torch.arange(states.shape[1])
    real = positions < lengths[:, None]  # (B, S)
    scores = _scores(state, states, W_q, W_k, w_v)  # (B, S)

    def average(weights):  # (B, S) -> (B, k)
        return (weights[:, :, None] * states).sum(1)

    def masked(scores, keep):
        return scores.masked_fill(~keep, float("-inf")).softmax(-1)

    untanhed = ((state @ W_q.T)[:, None, :] + states @ W_k.T) @ w_v
    return {
        "the plain average of the real states: weight them by the alignment": (
            (real[:, :, None] * states).sum(1) / lengths[:, None]
        ),
        "the pads were attended to: mask them before the softmax": average(scores.softmax(-1)),
        "the last real state: that is the bottleneck model's fixed context, not attention": (
            states[torch.arange(len(states)), lengths - 1]
        ),
        "the mask is one off: it lets in the first pad (positions <= lengths); the real tokens "
        "are positions 0 .. lengths - 1, so keep positions < lengths": average(
            masked(scores, positions <= lengths[:, None])
        ),
        "the mask is one off: it leaves out the last real token (positions < lengths - 1); "
        "the real tokens are positions 0 .. lengths - 1": average(
            masked(scores, positions < lengths[:, None] - 1)
        ),
        "no tanh: the score is w_v · tanh(W_q s + W_k h_j)": average(masked(untanhed, real)),
        "the pads' weights were zeroed after the softmax, so the real tokens' weights no "
        "longer sum to 1: mask the scores (with -inf) before the softmax": average(
            scores.softmax(-1) * real
        ),
        "the pads were scored 0, and exp(0) still gives them weight: give them -inf (or a "
        "large negative number) before the softmax": average(
            scores.masked_fill(~real, 0.0).softmax(-1)
        ),
        "the scores were divided by sqrt(a): that is the scaled dot product of chapter 03; the "
        "additive score has no scaling": average(masked(scores / len(w_v) ** 0.5, real)),
    }


@exercise_checker
def check_context_vector(learner_context: Callable) -> bool:
    """learner_context(state (B, h), encoder_states (B, S, k), lengths (B,), W_q (a, h),
    W_k (a, k), w_v (a,)) -> context (B, k): the average of each sentence's encoder states,
    weighted by the softmax over its real tokens (positions < lengths) of the scores
    w_v · tanh(W_q state + W_k h_j); without AdditiveAttention or helpers' masked_softmax.
    The tensors are float32, lengths int64 with 1 <= lengths <= S, and the pad positions of
    encoder_states hold numbers."""
    names = ("state", "encoder_states", "lengths", "W_q", "W_k", "w_v")
    failures, passed = [], 0
    for seed, lengths in ((5, (6, 2, 1)), (6, (3, 5))):
        given = _step_inputs(seed, lengths)
        args = tuple(given[name] for name in names)
        passed += run_case(
            f"lengths {given['lengths'].tolist()}",
            learner_context,
            args,
            _context,
            failures,
            hint="scores, a softmax over the real tokens only, then the weighted sum of the states",
            mistakes=_context_mistakes(given),
            forbidden=FORBIDDEN,
            names=names,
        )
    return report(failures, passed)
