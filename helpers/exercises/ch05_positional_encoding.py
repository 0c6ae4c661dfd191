"""Chapter 05's exercises: self-attention and positional encoding."""

from collections.abc import Callable

import torch

from helpers.exercises.framework import report, run_case
from helpers.positional import frequencies, sinusoidal_encoding

__all__ = ["check_sinusoidal_encoding"]


def check_sinusoidal_encoding(learner_encoding: Callable) -> bool:
    """learner_encoding(max_len, d_model) -> (max_len, d_model), as sinusoidal_encoding."""
    failures, passed = [], 0
    for max_len, d_model in ((6, 4), (50, 16), (100, 64)):
        positions = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
        angles = positions * frequencies(d_model)  # (max_len, d/2)
        slow_angles = positions * 10000 ** (-torch.arange(d_model // 2) / d_model)
        mistakes = {
            "sin and cos swapped: even dimensions take sin": torch.stack(
                [angles.cos(), angles.sin()], -1
            ).flatten(1),
            "all sines first, then all cosines: interleave them": torch.cat(
                [angles.sin(), angles.cos()], -1
            ),
            "the exponent is 2j/d for the pair (2j, 2j+1), not j/d": torch.stack(
                [slow_angles.sin(), slow_angles.cos()], -1
            ).flatten(1),
        }
        passed += run_case(
            f"max_len={max_len}, d_model={d_model}",
            learner_encoding,
            (max_len, d_model),
            sinusoidal_encoding,
            failures,
            1e-5,
            "P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))",
            {name: wrong.float() for name, wrong in mistakes.items()},
            convert=lambda got: got.float(),  # float64 is fine too
            forbidden={"sinusoidal_encoding": sinusoidal_encoding},
        )
    return report(failures, passed)
