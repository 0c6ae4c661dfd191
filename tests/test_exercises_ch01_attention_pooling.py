"""Chapter 01's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

import torch

from helpers.exercises import check_kernel_pooling, check_leave_one_out, check_vector_pooling
from helpers.kernel_regression import KERNELS, kernel_pooling
from solutions.ch01_attention_pooling import (
    epanechnikov_pooling,
    leave_one_out_pooling,
    vector_gaussian_pooling,
)

CHECKERS = {
    "kernel pooling": (check_kernel_pooling, epanechnikov_pooling),
    "leave one out": (check_leave_one_out, leave_one_out_pooling),
    "vector pooling": (check_vector_pooling, vector_gaussian_pooling),
}


# 1. Epanechnikov pooling


def gaussian_instead(queries, keys, values, width):
    weights = torch.exp(-(((queries[:, None] - keys) / width) ** 2) / 2)
    return (weights / weights.sum(1, keepdim=True)) @ values


def no_empty_window_check(queries, keys, values, width):
    weights = torch.clamp(1 - ((queries[:, None] - keys) / width) ** 2, min=0)
    return (weights / weights.sum(1, keepdim=True)) @ values  # 0 / 0 = NaN far from every key


def calls_kernel_pooling(queries, keys, values, width):
    return kernel_pooling(queries, keys, values, KERNELS["Epanechnikov"], width)[0]


def without_the_clamp(queries, keys, values, width):
    weights = 1 - ((queries[:, None] - keys) / width) ** 2  # negative beyond the width
    return (weights / weights.sum(1, keepdim=True)) @ values


def softmax_over_the_similarities(queries, keys, values, width):
    weights = torch.clamp(1 - ((queries[:, None] - keys) / width) ** 2, min=0)
    if (weights.sum(1) == 0).any():
        raise ValueError(f"no key within {width} of {queries[weights.sum(1) == 0].tolist()}")
    return torch.softmax(weights, dim=1) @ values


def error_without_the_query(queries, keys, values, width):
    weights = torch.clamp(1 - ((queries[:, None] - keys) / width) ** 2, min=0)
    if (weights.sum(1) == 0).any():
        raise ValueError("a query has no key within the width")
    return (weights / weights.sum(1, keepdim=True)) @ values


def nearest_key_only(queries, keys, values, width):
    return values[(queries[:, None] - keys).abs().argmin(dim=1)]


# 2. Leave-one-out predictions


def sees_itself(keys, values, kernel, width):
    similarity = kernel(keys[:, None] - keys[None, :], width)
    return similarity / similarity.sum(1, keepdim=True) @ values


def zeroes_the_diagonal_after_normalising(keys, values, kernel, width):
    similarity = kernel(keys[:, None] - keys[None, :], width)
    weights = similarity / similarity.sum(1, keepdim=True)
    return weights.masked_fill(torch.eye(len(keys), dtype=torch.bool), 0.0) @ values


def loops_over_the_points(keys, values, kernel, width):
    predictions = []
    for i in range(len(keys)):
        others = torch.arange(len(keys)) != i
        similarity = kernel(keys[i] - keys[others], width)
        predictions.append(similarity / similarity.sum() @ values[others])
    return torch.stack(predictions)


def fills_the_kernels_output_in_place(keys, values, kernel, width):
    similarity = kernel(keys[:, None] - keys[None, :], width)
    similarity.fill_diagonal_(0.0)  # overwrites what exp's gradient needs
    return similarity / similarity.sum(1, keepdim=True) @ values


def drops_every_zero_distance(keys, values, kernel, width):
    distances = keys[:, None] - keys[None, :]
    similarity = kernel(distances, width) * (distances != 0)  # drops a twin too
    return similarity / similarity.sum(1, keepdim=True) @ values


# 3. Vector queries and keys


def exp_then_divide(queries, keys, values, width):
    squared = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    similarity = torch.exp(-squared / (2 * width**2))  # 0 for every key, far from them all
    return similarity / similarity.sum(1, keepdim=True) @ values


def distance_with_a_square_root(queries, keys, values, width):
    distance = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1).sqrt()
    return torch.softmax(-(distance**2) / (2 * width**2), dim=1) @ values


def width_not_squared(queries, keys, values, width):
    squared = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)
    return torch.softmax(-squared / (2 * width), dim=1) @ values


def hard_lookup(queries, keys, values, width):  # all weight on the nearest key
    return values[torch.cdist(queries, keys).argmin(dim=1)]


WRONG = [
    ("kernel pooling", gaussian_instead, "the Gaussian kernel's predictions"),
    ("kernel pooling", without_the_clamp, "clamp it at 0"),
    ("kernel pooling", softmax_over_the_similarities, "went through a softmax"),
    ("kernel pooling", error_without_the_query, "does not say which query"),
    ("kernel pooling", nearest_key_only, "a hard lookup"),
    ("kernel pooling", no_empty_window_check, "raise a ValueError that names the query"),
    ("kernel pooling", calls_kernel_pooling, "calls kernel_pooling"),
    ("leave one out", sees_itself, "each point still sees its own value"),
    ("leave one out", zeroes_the_diagonal_after_normalising, "rows no longer sum to one"),
    ("leave one out", drops_every_zero_distance, "not only the point itself"),
    ("leave one out", loops_over_the_points, "calls the kernel once per point"),
    ("leave one out", fills_the_kernels_output_in_place, "such as fill_diagonal_"),
    ("vector pooling", exp_then_divide, "underflows to 0, and 0/0 is NaN"),
    ("vector pooling", distance_with_a_square_root, "whose slope is infinite at 0"),
    ("vector pooling", width_not_squared, "divide by 2σ², not by 2σ"),
    ("vector pooling", hard_lookup, "a hard lookup"),
]


def test_the_square_root_answer_fails_only_on_its_gradient(run_checker):
    verdict, out = run_checker(check_vector_pooling, distance_with_a_square_root)
    assert not verdict and "1 of 4 checks failed" in out and "-inf fill" not in out, out


def test_a_value_error_that_names_the_query_passes_that_case(run_checker):
    verdict, out = run_checker(check_kernel_pooling, softmax_over_the_similarities)
    assert "3 of 4 checks failed" in out and "a query with no key" not in out, out
