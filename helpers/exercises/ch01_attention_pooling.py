"""Chapter 01's exercises: attention pooling with a kernel.

1. check_kernel_pooling: pooling with a kernel that can be zero (Epanechnikov), which must
   refuse a query with no key within reach, with a ValueError that names it.
2. check_leave_one_out: leave-one-out predictions for any kernel, all points at once.
3. check_vector_pooling: Gaussian-kernel pooling of vector queries and keys, stable far from
   every key and differentiable where a query sits on a key.
"""

from collections.abc import Callable

import torch

from helpers.exercises.framework import Refused, exercise_checker, report, run_case, run_error_case
from helpers.kernel_regression import KERNELS, kernel_pooling

__all__ = ["check_kernel_pooling", "check_leave_one_out", "check_vector_pooling"]


def _explain(failures: list[str], before: int, words: str, extra: str) -> None:
    """Give the failure this case just added, when it contains `words`, the explanation
    `extra` (in place of the framework's general note about -inf fills)."""
    if len(failures) > before and words in failures[-1]:
        message = failures[-1].split(" (a -inf fill")[0]  # the general note does not apply
        failures[-1] = f"{message} ({extra})"


def _kernel_pooling_mistakes(kernel: str, queries, keys, values, width) -> dict:
    """What typical wrong answers return for these queries: {diagnosis: their predictions}."""
    distances = queries[:, None] - keys[None, :]  # (n_q, n_k)
    similarity = KERNELS[kernel](distances, width)  # (n_q, n_k)
    mistakes = {
        "the similarities went through a softmax: a kernel's values are weights already, "
        "divide them by their sum": torch.softmax(similarity, dim=1) @ values,
        "a hard lookup: all the weight on the nearest key, where every key within reach "
        "should get its share": values[distances.abs().argmin(dim=1)],
    }
    if kernel != "Gaussian":
        gaussian = KERNELS["Gaussian"](distances, width)
        mistakes[f"these are the Gaussian kernel's predictions: use the {kernel} kernel"] = (
            _normalised(gaussian) @ values
        )
    if kernel == "Epanechnikov":
        unclamped = 1 - (distances / width) ** 2  # negative beyond the width
        mistakes[
            "keys farther than the width got negative similarities: the kernel is "
            "max(0, 1 - (d/σ)²), so clamp it at 0 (torch.clamp(..., min=0))"
        ] = _normalised(unclamped) @ values
    return mistakes


def _refuses_far_query(pooling: Callable, args: tuple, far_query: float, failures: list[str]):
    """The pooling must raise a ValueError for these arguments, and its message must name the
    query that has no key within reach."""
    name = "a query with no key within the width"
    messages = []

    def recording(*inputs):
        try:
            return pooling(*inputs)
        except ValueError as error:
            messages.append(str(error))
            raise

    if not run_error_case(
        name,
        recording,
        args,
        ValueError,
        f"every weight is 0 there, so 0/0: raise a ValueError that names the query ({far_query:g})",
        failures,
    ):
        return False
    if f"{far_query:g}" in messages[-1]:
        return True
    failures.append(
        f"{name}: the ValueError is right, but its message ({messages[-1]!r}) does not say "
        f"which query has no key within reach: name it (here {far_query:g}), so that the "
        f"caller can find it"
    )
    return False


@exercise_checker
def check_kernel_pooling(pooling: Callable, kernel: str = "Epanechnikov") -> bool:
    """pooling(queries, keys, values, width) -> predictions (n_queries,), for the named kernel,
    without calling kernel_pooling; a query with no key within reach raises a ValueError whose
    message names that query."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    generator = torch.Generator().manual_seed(1)
    keys = torch.sort(torch.rand(30, generator=generator) * 5).values
    values = torch.randn(30, generator=generator)
    queries = torch.linspace(0.2, 4.8, 7)
    failures, passed = [], 0
    for width in (0.6, 1.5, 4.0):
        passed += run_case(
            f"{kernel} kernel, width {width}",
            pooling,
            (queries, keys, values, width),
            lambda q, k, v, w: kernel_pooling(q, k, v, KERNELS[kernel], w)[0],
            failures,
            mistakes=_kernel_pooling_mistakes(kernel, queries, keys, values, width),
            forbidden={"kernel_pooling": kernel_pooling},
            names=("queries", "keys", "values", "width"),
        )
    if kernel in ("Boxcar", "Epanechnikov"):  # kernels that reach only so far
        far = torch.tensor([2.0, 40.0])  # no key lies within 0.6 of x = 40
        passed += _refuses_far_query(pooling, (far, keys, values, 0.6), 40.0, failures)
    return report(failures, passed)


def _leave_one_out_reference(kernel: Callable) -> Callable:
    def reference(keys, values, _kernel, width):
        similarity = kernel(keys[:, None] - keys[None, :], width)  # (n, n)
        itself = torch.eye(len(keys), dtype=torch.bool)
        similarity = similarity.masked_fill(itself, 0.0)  # nobody sees their own value
        return similarity / similarity.sum(dim=1, keepdim=True) @ values  # (n,)

    return reference


def _normalised(similarity: torch.Tensor) -> torch.Tensor:
    return similarity / similarity.sum(dim=1, keepdim=True)


def _counting(kernel: Callable, limit: int = 2) -> Callable:
    """The kernel, refusing to be called once per point (a Python loop over the points)."""
    calls = []

    def counted(d, width=1.0):
        calls.append(1)
        if len(calls) > limit:
            raise Refused(
                "calls the kernel once per point (a Python loop): compute all n × n distances "
                "keys[:, None] - keys[None, :] at once and call the kernel on them once"
            )
        return kernel(d, width)

    return counted


@exercise_checker
def check_leave_one_out(leave_one_out: Callable) -> bool:
    """leave_one_out(keys, values, kernel, width) -> predictions (n,): each training point's
    value predicted from all the *other* points by kernel pooling, with any kernel of
    KERNELS (a function of distance and width), all points at once (no Python loop)."""
    generator = torch.Generator().manual_seed(11)
    keys = torch.sort(torch.rand(12, generator=generator) * 3).values
    keys[6] = keys[5]  # two points at the same x: a distance of 0 is not "itself"
    values = torch.randn(12, generator=generator)
    failures, passed = [], 0
    for name, width in (("Gaussian", 0.4), ("Epanechnikov", 1.5), ("Boxcar", 1.2)):
        kernel = KERNELS[name]
        reference = _leave_one_out_reference(kernel)
        distances = keys[:, None] - keys[None, :]
        similarity = kernel(distances, width)  # (n, n), the diagonal included
        weights = similarity / similarity.sum(dim=1, keepdim=True)
        zeroed_after = weights.masked_fill(torch.eye(12, dtype=torch.bool), 0.0)
        mistakes = {
            "each point still sees its own value: give the diagonal (key i for query i) "
            "similarity 0 before normalising": weights @ values,
            "the diagonal was zeroed after normalising, so the rows no longer sum to one: "
            "zero it first, then divide by the sum over the other keys": zeroed_after @ values,
            "leaves out every key at distance 0, not only the point itself: points 5 and 6 "
            "share one x, and each must still see the other (mask the diagonal, not the "
            "zero distances)": _normalised(similarity * (distances != 0)) @ values,
            "the similarities went through a softmax: a kernel's values are weights already, "
            "divide them by their sum": torch.softmax(
                similarity.masked_fill(torch.eye(12, dtype=torch.bool), float("-inf")), dim=1
            )
            @ values,
        }
        passed += run_case(
            f"{name} kernel, width {width}",
            leave_one_out,
            (keys, values, _counting(kernel), width),
            reference,
            failures,
            mistakes=mistakes,
            names=("keys", "values", "kernel", "width"),
        )
        if failures and "modified by an inplace operation" in failures[-1]:
            failures[-1] = (
                f"{name} kernel, width {width}: the gradient cannot be computed, because an "
                f"in-place operation (such as fill_diagonal_ or masked_fill_) overwrote a "
                f"tensor that autograd needs: use masked_fill, which returns a new tensor"
            )
    return report(failures, passed)


def _vector_reference(queries, keys, values, width):
    squared = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)  # (n_q, n_k)
    return torch.softmax(-squared / (2 * width**2), dim=1) @ values  # (n_q, d_v)


def _vector_mistakes(queries, keys, values, width) -> dict:
    squared = ((queries[:, None, :] - keys[None, :, :]) ** 2).sum(-1)  # (n_q, n_k)
    mistakes = {
        "the score must use the squared distance |q - k|², not the distance |q - k|": (
            torch.softmax(-squared.sqrt() / (2 * width**2), dim=1) @ values
        ),
        "a hard lookup: all the weight on the nearest key, where every key should get a "
        "weight proportional to exp(-|q - k|² / 2σ²)": values[squared.argmin(dim=1)],
    }
    if width != 1.0:
        mistakes["the width is missing: divide the squared distance by 2σ²"] = (
            torch.softmax(-squared / 2, dim=1) @ values
        )
        mistakes["the width must be squared: divide by 2σ², not by 2σ"] = (
            torch.softmax(-squared / (2 * width), dim=1) @ values
        )
    return mistakes


@exercise_checker
def check_vector_pooling(vector_pooling: Callable) -> bool:
    """vector_pooling(queries (n_q, d), keys (n_k, d), values (n_k, d_v), width) ->
    (n_q, d_v): Gaussian-kernel pooling with the Euclidean distance, exp(-|q - k|² / 2σ²)
    normalised over the keys. Far from every key it must not return 0/0, and where a query
    sits exactly on a key its gradient must stay finite."""
    generator = torch.Generator().manual_seed(12)
    queries = torch.randn(4, 3, generator=generator)
    keys = torch.randn(6, 3, generator=generator)
    values = torch.randn(6, 2, generator=generator)
    far = queries.clone()
    far[1] += 40.0  # every squared distance above 3000: e^(-1500) is 0 in float32
    on_a_key = queries.clone()
    on_a_key[2] = keys[4]
    underflow = (
        "far from every key each e^(-|q - k|² / 2σ²) underflows to 0, and 0/0 is NaN: normalise "
        "with a softmax of the scores -|q - k|² / 2σ², which subtracts the row maximum first"
    )
    root = (
        "a distance |q - k| is a square root, whose slope is infinite at 0: the Gaussian needs "
        "only the squared distance, so square and sum the differences and take no root"
    )
    cases = [
        ("width 1", queries, 1.0, "", ""),
        ("width 0.5", queries, 0.5, "", ""),
        ("a query far from every key", far, 1.0, underflow, ""),
        ("a query exactly on a key", on_a_key, 1.0, "", root),
    ]
    failures, passed = [], 0
    for name, case_queries, width, hint, gradient_hint in cases:
        before = len(failures)
        passed += run_case(
            name,
            vector_pooling,
            (case_queries, keys, values, width),
            _vector_reference,
            failures,
            mistakes=_vector_mistakes(case_queries, keys, values, width),
            names=("queries", "keys", "values", "width"),
        )
        if hint and len(failures) > before and "NaN" in failures[-1]:
            failures[-1] += f" ({hint})"
        if gradient_hint:
            _explain(failures, before, "gradient", gradient_hint)
    return report(failures, passed)
