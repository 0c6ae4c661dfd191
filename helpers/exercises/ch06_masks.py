"""Chapter 06's exercises: masks."""

from collections.abc import Callable

import torch

from helpers.exercises.framework import report, run_case
from helpers.masks import causal_mask, causal_padding_mask, padding_mask

__all__ = ["check_decoder_mask"]


def check_decoder_mask(learner_mask: Callable) -> bool:
    """learner_mask(tokens, pad_id) -> boolean (B, n, n), True where query i may attend to
    key j: causal, and no pad key, with pads anywhere. Masking the pad queries' rows as well
    (as chapter 06 recommends for a fully padded row) is right too."""
    pad = 0
    cases = {
        "right padding": torch.tensor([[5, 6, 7, 0, 0]]),
        "left padding": torch.tensor([[0, 0, 5, 6, 7]]),
        "a pad in the middle and a batch of two": torch.tensor([[5, 0, 6, 7, 8], [5, 6, 7, 8, 9]]),
    }
    failures, passed = [], 0
    for name, tokens in cases.items():
        n = tokens.shape[1]
        mistakes = {
            "True where attending is NOT allowed: that is torch's convention, not ours": ~(
                causal_padding_mask(tokens, pad)
            ),
            "not causal: query i must not see keys after i": padding_mask(tokens, pad).expand(
                -1, n, -1
            ),
            "pad keys are not masked": causal_mask(n).expand(len(tokens), -1, -1),
            "masks the pad queries' rows instead of the pad keys' columns": (
                (tokens != pad)[:, :, None] & causal_mask(n)
            ),
        }
        rows_too = causal_padding_mask(tokens, pad) & (tokens != pad)[:, :, None]
        passed += run_case(
            name,
            lambda t: learner_mask(t, pad),
            (tokens,),
            lambda t: causal_padding_mask(t, pad),
            failures,
            0,
            "combine padding_mask and causal_mask with &",
            mistakes,
            forbidden={"causal_padding_mask": causal_padding_mask},
            names=("tokens",),
            alternatives=(rows_too,),
        )
    return report(failures, passed)
