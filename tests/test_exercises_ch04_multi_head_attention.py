"""Chapter 04's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

from helpers.exercises import check_split_merge
from solutions.ch04_multi_head_attention import merge, split

CHECKERS = {
    "split": (lambda answer: check_split_merge(answer, merge), split),
    "merge": (lambda answer: check_split_merge(split, answer), merge),
}


def split_without_transpose(x, num_heads):
    batch, n, d = x.shape
    return x.reshape(batch, num_heads, n, d // num_heads)


def merge_with_view(x):  # survives merge(split(x)), fails on a fresh tensor
    batch, heads, n, d_head = x.shape
    return x.transpose(1, 2).view(batch, n, heads * d_head)


WRONG = [
    ("split", split_without_transpose, "split, x (2, 3, 8), 4 heads"),
    ("merge", merge_with_view, "view size is not compatible"),
]
