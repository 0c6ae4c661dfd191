"""Chapter 04's exercises: multi-head attention."""

from collections.abc import Callable

import torch

from helpers.attention import merge_heads, split_heads
from helpers.exercises.framework import report, run_case

__all__ = ["check_split_merge"]


def check_split_merge(learner_split: Callable, learner_merge: Callable) -> bool:
    """learner_split(x, heads): (B, n, d) -> (B, heads, n, d / heads); learner_merge undoes it.

    The inputs count 0, 1, 2, ... so a wrong answer shows which feature landed where. The
    merge cases feed a fresh (contiguous) tensor, as attention's output is: a merge that
    uses view after a transpose fails there, though it survives merge(split(x)).
    """
    forbidden = {"split_heads": split_heads, "merge_heads": merge_heads}
    failures, passed = [], 0
    for batch, n, d, heads in ((2, 3, 8, 4), (1, 5, 12, 3), (3, 4, 6, 1)):
        x = torch.arange(batch * n * d, dtype=torch.float32).reshape(batch, n, d)
        name = f"x {tuple(x.shape)}, {heads} heads"
        passed += run_case(
            f"split, {name}",
            learner_split,
            (x, heads),
            split_heads,
            failures,
            0,
            "head j holds features j*d_head up to (j+1)*d_head - 1 of every position",
            forbidden=forbidden,
            names=("x", "num_heads"),
        )
        passed += run_case(
            f"merge, {name}",
            learner_merge,
            (split_heads(x, heads).contiguous(),),
            merge_heads,
            failures,
            0,
            "undo the split: transpose back, then reshape",
            forbidden=forbidden,
            names=("x",),
        )
    return report(failures, passed)
