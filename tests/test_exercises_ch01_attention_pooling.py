"""Chapter 01's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.exercises import check_kernel_pooling
from helpers.kernel_regression import KERNELS, kernel_pooling
from solutions.ch01_attention_pooling import epanechnikov_pooling

CHECKERS = {
    "kernel pooling": (check_kernel_pooling, epanechnikov_pooling),
}


def gaussian_instead(queries, keys, values, width):
    weights = torch.exp(-(((queries[:, None] - keys) / width) ** 2) / 2)
    return (weights / weights.sum(1, keepdim=True)) @ values


def no_empty_window_check(queries, keys, values, width):
    weights = torch.clamp(1 - ((queries[:, None] - keys) / width) ** 2, min=0)
    return (weights / weights.sum(1, keepdim=True)) @ values  # 0 / 0 = NaN far from every key


def calls_kernel_pooling(queries, keys, values, width):
    return kernel_pooling(queries, keys, values, KERNELS["Epanechnikov"], width)[0]


WRONG = [
    ("kernel pooling", gaussian_instead, "at index"),
    ("kernel pooling", no_empty_window_check, "raise a ValueError that names the query"),
    ("kernel pooling", calls_kernel_pooling, "calls kernel_pooling"),
]
