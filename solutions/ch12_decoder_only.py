"""Chapter 12's exercises, solved as a learner would: top-p filtering of a batch of logits, the
prefix-LM mask from the prompts' lengths, and the loss over the answer tokens only."""

import torch
import torch.nn.functional as F


def top_p_filter(logits, top_p):
    """logits (B, V), top_p in (0, 1] -> (B, V): -inf outside the nucleus, the smallest set of
    most likely tokens whose probabilities reach top_p; the kept logits as they came."""
    if top_p >= 1:
        return logits.clone()  # every token stays
    probabilities, order = logits.softmax(dim=-1).sort(dim=-1, descending=True)  # (B, V)
    before = probabilities.cumsum(dim=-1) - probabilities  # the mass of the likelier tokens
    keep_sorted = before < top_p  # (B, V): the first token always stays (before = 0)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to token order
    return logits.masked_fill(~keep, float("-inf"))


def prefix_lm_mask(prompt_lengths, size):
    """prompt_lengths (B,), size -> (B, size, size) bool, True = may attend: causal, and the
    prompt (the first prompt_lengths[b] positions) reads the whole prompt."""
    positions = torch.arange(size)  # (size,)
    causal = positions[None, :] <= positions[:, None]  # (queries, keys): key j <= query i
    in_prompt = positions[None, :] < prompt_lengths[:, None]  # (B, size)
    both_in_prompt = in_prompt[:, :, None] & in_prompt[:, None, :]  # (B, queries, keys)
    return causal[None] | both_in_prompt


def answer_loss(logits, sequences, separator_id):
    """logits (B, T - 1, V), sequences (B, T) <bos> English <sep> French <eos> <pad>... -> the
    mean cross-entropy over the targets after <sep> (the French and <eos>), pads left out."""
    targets = sequences[:, 1:]  # (B, T - 1): position t predicts token t + 1
    seen_separator = (sequences == separator_id).cumsum(dim=1)[:, :-1] > 0  # <sep> at or before t
    targets = targets.masked_fill(~seen_separator, 0)  # <pad> (0): not scored
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=0)
