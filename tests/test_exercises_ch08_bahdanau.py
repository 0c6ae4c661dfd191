"""Chapter 08's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.attention import AdditiveAttention
from helpers.exercises import check_alignment, check_alignment_scores, check_context_vector
from solutions.ch08_bahdanau import alignment, alignment_scores, context_vector

CHECKERS = {
    "alignment scores": (check_alignment_scores, alignment_scores),
    "alignment": (check_alignment, alignment),
    "context vector": (check_context_vector, context_vector),
}


def scores_without_tanh(state, encoder_states, W_q, W_k, w_v):
    return ((state @ W_q.T).unsqueeze(1) + encoder_states @ W_k.T) @ w_v


def scores_with_the_module(state, encoder_states, W_q, W_k, w_v):
    attention = AdditiveAttention(encoder_states.shape[-1], state.shape[-1], len(w_v))
    with torch.no_grad():
        attention.W_q.weight.copy_(W_q)
        attention.W_k.weight.copy_(W_k)
        attention.w_v.weight.copy_(w_v[None])
    attention(state[:, None], encoder_states, encoder_states)
    return torch.log(attention.attention_weights[:, 0])  # right up to a constant, and forbidden


def alignment_over_the_pads(scores, lengths):
    return scores.softmax(-1)


def alignment_zeroed_after_the_softmax(scores, lengths):
    return scores.softmax(-1) * (torch.arange(scores.shape[1]) < lengths[:, None])


def context_as_a_plain_average(state, encoder_states, lengths, W_q, W_k, w_v):
    real = (torch.arange(encoder_states.shape[1]) < lengths[:, None]).float()
    return (real[:, :, None] * encoder_states).sum(1) / lengths[:, None]


def context_from_the_last_state(state, encoder_states, lengths, W_q, W_k, w_v):
    return encoder_states[torch.arange(len(lengths)), lengths - 1]


def context_in_place(state, encoder_states, lengths, W_q, W_k, w_v):
    weights = alignment(alignment_scores(state, encoder_states, W_q, W_k, w_v), lengths)
    encoder_states.mul_(weights.unsqueeze(-1))  # scales the caller's states
    return encoder_states.sum(1)


WRONG = [
    ("alignment scores", scores_without_tanh, "no tanh"),
    ("alignment scores", scores_with_the_module, "calls AdditiveAttention"),
    ("alignment", alignment_over_the_pads, "the pads got weight"),
    ("alignment", alignment_zeroed_after_the_softmax, "no longer sum to 1"),
    ("context vector", context_as_a_plain_average, "the plain average"),
    ("context vector", context_from_the_last_state, "the bottleneck model's fixed context"),
    ("context vector", context_in_place, "changes its input `encoder_states` in place"),
]
