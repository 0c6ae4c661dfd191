"""Chapter 03's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch
import torch.nn.functional as F

from helpers.attention import masked_softmax as helper_masked_softmax
from helpers.exercises import check_dot_product_attention
from solutions.ch03_scoring_functions import dot_product_attention

CHECKERS = {
    "dot-product attention": (check_dot_product_attention, dot_product_attention),
}


def unscaled(queries, keys, values, valid_lens):
    return helper_masked_softmax(queries @ keys.transpose(1, 2), valid_lens) @ values


def calls_sdpa(queries, keys, values, valid_lens):
    mask = None
    if valid_lens is not None:
        lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
        mask = torch.arange(keys.shape[1]) < lens
    return F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)


def detached(queries, keys, values, valid_lens):
    return dot_product_attention(queries, keys, values, valid_lens).detach()


WRONG = [
    ("dot-product attention", unscaled, "looks unscaled"),
    ("dot-product attention", calls_sdpa, "calls torch's scaled_dot_product_attention"),
    ("dot-product attention", detached, "no gradient flows back"),
]
