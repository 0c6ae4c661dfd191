"""Check functions for the exercises: each runs a learner's function on cases with
known answers and says which case failed and how, or that all passed."""

from collections.abc import Callable

import torch

from helpers.attention import DotProductAttention, masked_softmax, split_heads
from helpers.kernel_regression import KERNELS, kernel_pooling
from helpers.masks import causal_mask, causal_padding_mask, padding_mask
from helpers.positional import frequencies, sinusoidal_encoding


def _report(failures: list[str], passed: int) -> bool:
    if failures:
        print(f"Not yet: {len(failures)} of {len(failures) + passed} checks failed.")
        for failure in failures:
            print(f"  - {failure}")
        return False
    print(f"Correct: all {passed} checks passed.")
    return True


def _as_answer(got, convert=None):
    """(tensor, None), or (None, what is wrong with the learner's return value)."""
    if got is None:
        return None, "returned None: did the function forget to `return` its result?"
    if isinstance(got, tuple | list) and got and isinstance(got[0], torch.Tensor):
        return None, f"returned a {type(got).__name__} of {len(got)} tensors, expected one tensor"
    try:
        got = torch.as_tensor(got)
    except Exception:  # anything torch cannot read as numbers
        return None, f"returned a {type(got).__name__}, expected a tensor"
    if got.layout != torch.strided or got.is_meta or got.is_complex():
        kind = "complex" if got.is_complex() else "meta" if got.is_meta else "sparse"
        return None, f"returned a {kind} tensor, expected an ordinary real one"
    return (convert(got.detach()) if convert else got.detach()), None


def _run_case(
    name, function, args, expected, failures, atol=1e-5, hint="", mistakes=None, convert=None
):
    """Compare function(*args) with expected; append a failure message if they differ.

    mistakes: {diagnosis: what that mistake returns}; a wrong answer equal to one of them
    is reported with that diagnosis instead of the general hint. convert: applied to the
    answer before it is compared (e.g. to accept float64 where float32 is expected).
    """
    try:
        got = function(*args)
    except (Exception, SystemExit) as error:  # the learner's code may fail in any way
        failures.append(f"{name}: your function raised {type(error).__name__}: {error}")
        return False
    got, problem = _as_answer(got, convert)
    if problem:
        failures.append(f"{name}: {problem}")
        return False
    problem = None
    if got.shape != expected.shape:
        problem = f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    elif got.dtype != expected.dtype:
        why = "a boolean mask" if expected.dtype == torch.bool else "keep the input's dtype"
        problem = f"dtype {got.dtype}, expected {expected.dtype} ({why})"
    elif torch.isnan(got).any():
        where = tuple(torch.nonzero(torch.isnan(got))[0].tolist())
        problem = f"NaN at index {where}"
    else:
        error = (got.double() - expected.double()).abs()
        if error.max() > atol:
            where = tuple(torch.nonzero(error == error.max())[0].tolist())
            problem = (
                f"at index {where} got {got[where].item():.4g}, "
                f"expected {expected[where].item():.4g}"
            )
    if problem is None:
        return True
    for diagnosis, mistaken in (mistakes or {}).items():
        if got.shape == mistaken.shape and torch.allclose(
            got.double(), mistaken.double(), atol=atol
        ):
            hint = diagnosis
    failures.append(f"{name}: {problem}" + (f" ({hint})" if hint else ""))
    return False


def check_kernel_pooling(pooling: Callable, kernel: str = "Epanechnikov") -> bool:
    """pooling(queries, keys, values, width) -> predictions (n_queries,), for the named kernel."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    generator = torch.Generator().manual_seed(1)
    keys = torch.sort(torch.rand(30, generator=generator) * 5).values
    values = torch.randn(30, generator=generator)
    failures, passed = [], 0
    for width in (0.6, 1.5, 4.0):
        queries = torch.linspace(0.2, 4.8, 7)
        expected, _ = kernel_pooling(queries, keys, values, KERNELS[kernel], width)
        passed += _run_case(
            f"{kernel} kernel, width {width}",
            pooling,
            (queries, keys, values, width),
            expected,
            failures,
        )
    return _report(failures, passed)


def check_masked_softmax(learner_masked_softmax: Callable) -> bool:
    """learner_masked_softmax(scores, valid_lens) -> weights, like attention.masked_softmax."""
    generator = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 3, 5, generator=generator)
    cases = [
        ("one valid length per example", scores, torch.tensor([2, 5]), ""),
        ("one valid length per query", scores, torch.tensor([[1, 2, 3], [5, 4, 1]]), ""),
        ("large scores", scores * 1000, torch.tensor([3, 4]), "subtract the row maximum"),
        (
            "a fully masked row (valid length 0)",
            scores,
            torch.tensor([0, 3]),
            "a row with no allowed key must be all zeros",
        ),
        ("float16 scores", scores.half(), torch.tensor([1, 4]), "-1e9 does not fit in float16"),
    ]
    failures, passed = [], 0
    for name, case_scores, lens, hint in cases:
        expected = masked_softmax(case_scores, valid_lens=lens)
        passed += _run_case(
            name, learner_masked_softmax, (case_scores, lens), expected, failures, 2e-3, hint
        )
    return _report(failures, passed)


def check_dot_product_attention(learner_attention: Callable) -> bool:
    """learner_attention(queries, keys, values, valid_lens) -> output, as DotProductAttention."""
    generator = torch.Generator().manual_seed(3)
    queries = torch.randn(2, 3, 16, generator=generator)
    keys = torch.randn(2, 5, 16, generator=generator)
    values = torch.randn(2, 5, 4, generator=generator)
    cases = [
        ("no mask", 1.0, None, ""),
        ("valid lengths (2, 5)", 1.0, torch.tensor([2, 5]), "keys at or past the length get 0"),
        (
            "one valid length per query",
            1.0,
            torch.tensor([[1, 2, 3], [5, 5, 0]]),
            "a query with valid length 0 gets all-zero weights",
        ),
        ("scores in the hundreds", 30.0, torch.tensor([3, 4]), "subtract the row maximum"),
    ]
    failures, passed = [], 0
    for name, size, lens, hint in cases:
        q, k = queries * size, keys * size
        d = q.shape[-1]
        mistakes = {
            "looks unscaled: divide the scores by sqrt(d)": masked_softmax(
                q @ k.transpose(1, 2), lens
            )
            @ values,
            "divided by d: divide by sqrt(d)": masked_softmax(q @ k.transpose(1, 2) / d, lens)
            @ values,
        }
        expected = DotProductAttention()(q, k, values, valid_lens=lens)
        passed += _run_case(
            name, learner_attention, (q, k, values, lens), expected, failures, 1e-5, hint, mistakes
        )
    return _report(failures, passed)


def check_split_merge(learner_split: Callable, learner_merge: Callable) -> bool:
    """learner_split(x, heads): (B, n, d) -> (B, heads, n, d / heads); learner_merge undoes it.

    The inputs count 0, 1, 2, ... so a wrong answer shows which feature landed where. The
    merge cases feed a fresh (contiguous) tensor, as attention's output is: a merge that
    uses view after a transpose fails there, though it survives merge(split(x)).
    """
    failures, passed = [], 0
    for batch, n, d, heads in ((2, 3, 8, 4), (1, 5, 12, 3), (3, 4, 6, 1)):
        x = torch.arange(batch * n * d, dtype=torch.float32).reshape(batch, n, d)
        name = f"x {tuple(x.shape)}, {heads} heads"
        passed += _run_case(
            f"split, {name}",
            learner_split,
            (x, heads),
            split_heads(x, heads),
            failures,
            0,
            "head j holds features j*d_head up to (j+1)*d_head - 1 of every position",
        )
        passed += _run_case(
            f"merge, {name}",
            learner_merge,
            (split_heads(x, heads).contiguous(),),
            x,
            failures,
            0,
            "undo the split: transpose back, then reshape",
        )
    return _report(failures, passed)


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
        passed += _run_case(
            f"max_len={max_len}, d_model={d_model}",
            learner_encoding,
            (max_len, d_model),
            sinusoidal_encoding(max_len, d_model),
            failures,
            1e-5,
            "P[i, 2j] = sin(i / 10000^(2j/d)), P[i, 2j+1] = cos(i / 10000^(2j/d))",
            {name: wrong.float() for name, wrong in mistakes.items()},
            convert=lambda got: got.float(),  # float64 is fine too
        )
    return _report(failures, passed)


def check_decoder_mask(learner_mask: Callable) -> bool:
    """learner_mask(tokens, pad_id) -> boolean (B, n, n), True where query i may attend to
    key j: causal, and no pad key, with pads anywhere."""
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
        passed += _run_case(
            name,
            lambda t: learner_mask(t, pad),
            (tokens,),
            causal_padding_mask(tokens, pad),
            failures,
            0,
            "combine padding_mask and causal_mask with &",
            mistakes,
        )
    return _report(failures, passed)


def check_pre_norm_residual(learner_residual: Callable) -> bool:
    """learner_residual(x, sublayer, norm) -> the pre-norm residual connection's output."""
    generator = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    norm = torch.nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    sublayer = torch.nn.Linear(8, 8)
    failures, passed = [], 0
    for shape in ((2, 3, 8), (1, 5, 8)):
        x = torch.randn(*shape, generator=generator) * 3 + 1
        with torch.no_grad():
            expected = x + sublayer(norm(x))
            mistakes = {
                "that is post-norm: normalise the sublayer's input, not the sum": norm(
                    x + sublayer(x)
                ),
                "the residual is missing: add x back": sublayer(norm(x)),
                "add the original x, not the normalised one": norm(x) + sublayer(norm(x)),
            }
        passed += _run_case(
            f"x {shape}",
            lambda x: learner_residual(x, sublayer, norm),
            (x,),
            expected,
            failures,
            1e-5,
            "pre-norm: x + sublayer(norm(x))",
            mistakes,
        )
    return _report(failures, passed)
