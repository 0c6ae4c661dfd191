"""Chapter 08's exercises: Bahdanau attention for one decoder step, from raw weights.

1. check_alignment_scores: the additive score of every encoder state for one decoder state.
2. check_alignment: the scores turned into weights over each sentence's real tokens only.
3. check_context_vector: the whole step, from the decoder state to the context vector.
"""

from collections.abc import Callable

import torch

from helpers.attention import AdditiveAttention, masked_softmax
from helpers.exercises.framework import report, run_case

__all__ = ["check_alignment", "check_alignment_scores", "check_context_vector"]

FORBIDDEN = {
    "AdditiveAttention": AdditiveAttention.forward,
    "helpers.attention.masked_softmax": masked_softmax,
}
STATE_NAMES = ("state", "encoder_states", "W_q", "W_k", "w_v")


def _step_inputs(seed: int, batch: int = 3, length: int = 6, hidden: int = 4, keys: int = 8):
    """A decoder state (B, h), encoder states (B, S, k) with something in the pad positions
    (so that ignoring the mask shows), lengths (B,) and the attention's weights."""
    generator = torch.Generator().manual_seed(seed)
    attention = 5

    def draw(*shape):
        return torch.randn(*shape, generator=generator)

    lengths = torch.tensor([length, 2, 1][:batch])
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


def check_alignment_scores(learner_scores: Callable) -> bool:
    """learner_scores(state (B, h), encoder_states (B, S, k), W_q (a, h), W_k (a, k), w_v (a,))
    -> scores (B, S): w_v · tanh(W_q state + W_k h_j) for every encoder state h_j."""
    failures, passed = [], 0
    for seed in (1, 2):
        given = _step_inputs(seed)
        args = tuple(given[name] for name in STATE_NAMES)
        state, states, W_q, W_k, w_v = args
        mistakes = {
            "no tanh: the score is w_v · tanh(W_q s + W_k h)": (
                (state @ W_q.T)[:, None] + states @ W_k.T
            )
            @ w_v,
            "tanh applied to each projection separately: add them first, then tanh": (
                torch.tanh(state @ W_q.T)[:, None] + torch.tanh(states @ W_k.T)
            )
            @ w_v,
        }
        passed += run_case(
            f"batch of {len(state)}, seed {seed}",
            learner_scores,
            args,
            _scores,
            failures,
            hint="project the state with W_q and every encoder state with W_k, add, tanh, · w_v",
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=STATE_NAMES,
        )
    return report(failures, passed)


def check_alignment(learner_alignment: Callable) -> bool:
    """learner_alignment(scores (B, S), lengths (B,)) -> weights (B, S): a softmax over the
    first lengths[b] positions of row b, exactly 0 on its pads."""
    failures, passed = [], 0
    for seed in (3, 4):
        given = _step_inputs(seed)
        scores = _scores(*(given[name] for name in STATE_NAMES)) * 3
        lengths = given["lengths"]
        positions = torch.arange(scores.shape[1])
        mistakes = {
            "the pads got weight: mask the positions at or past each length": scores.softmax(-1),
            "the weights were zeroed after the softmax, so they no longer sum to 1: mask the "
            "scores before it": scores.softmax(-1) * (positions < lengths[:, None]),
            "one position too many: position lengths[b] is already a pad": _alignment(
                scores, (lengths + 1).clamp(max=scores.shape[1])
            ),
        }
        passed += run_case(
            f"lengths {lengths.tolist()}",
            learner_alignment,
            (scores, lengths),
            _alignment,
            failures,
            hint="fill the scores of the pads with -inf, then softmax",
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=("scores", "lengths"),
        )
    return report(failures, passed)


def _context(state, encoder_states, lengths, W_q, W_k, w_v):
    weights = _alignment(_scores(state, encoder_states, W_q, W_k, w_v), lengths)  # (B, S)
    return (weights[:, :, None] * encoder_states).sum(1)  # (B, k)


def check_context_vector(learner_context: Callable) -> bool:
    """learner_context(state, encoder_states, lengths, W_q, W_k, w_v) -> context (B, k): the
    average of each sentence's encoder states, weighted by the alignment of exercise 2."""
    names = ("state", "encoder_states", "lengths", "W_q", "W_k", "w_v")
    failures, passed = [], 0
    for seed in (5, 6):
        given = _step_inputs(seed)
        args = tuple(given[name] for name in names)
        states, lengths = given["encoder_states"], given["lengths"]
        real = (torch.arange(states.shape[1]) < lengths[:, None]).float()  # (B, S)
        unmasked = _scores(*(given[name] for name in STATE_NAMES)).softmax(-1)
        mistakes = {
            "the plain average of the real states: weight them by the alignment": (
                (real[:, :, None] * states).sum(1) / lengths[:, None]
            ),
            "the pads were attended to: mask them before the softmax": (
                unmasked[:, :, None] * states
            ).sum(1),
            "the last real state: that is the bottleneck model's fixed context, not attention": (
                states[torch.arange(len(states)), lengths - 1]
            ),
        }
        passed += run_case(
            f"lengths {lengths.tolist()}",
            learner_context,
            args,
            _context,
            failures,
            hint="scores (exercise 1), alignment (exercise 2), then the weighted sum of states",
            mistakes=mistakes,
            forbidden=FORBIDDEN,
            names=names,
        )
    return report(failures, passed)
