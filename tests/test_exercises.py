"""Every checker passes its worked solution (solutions/), refuses typical wrong answers with the
message that names the mistake, and answers any answer at all without raising."""

import pytest
import torch
import torch.nn.functional as F

from helpers.attention import masked_softmax as helper_masked_softmax
from helpers.exercises import (
    check_decoder_mask,
    check_dot_product_attention,
    check_kernel_pooling,
    check_masked_softmax,
    check_pre_norm_residual,
    check_sinusoidal_encoding,
    check_split_merge,
)
from helpers.kernel_regression import KERNELS, kernel_pooling
from helpers.positional import sinusoidal_encoding
from solutions.ch01_attention_pooling import epanechnikov_pooling
from solutions.ch02_masked_softmax import masked_softmax
from solutions.ch03_scoring_functions import dot_product_attention
from solutions.ch04_multi_head_attention import merge, split
from solutions.ch05_positional_encoding import sinusoidal
from solutions.ch06_masks import decoder_mask
from solutions.ch07_transformer import pre_norm_residual

CHECKERS = {
    "kernel pooling": (check_kernel_pooling, epanechnikov_pooling),
    "masked softmax": (check_masked_softmax, masked_softmax),
    "dot-product attention": (check_dot_product_attention, dot_product_attention),
    "split": (lambda answer: check_split_merge(answer, merge), split),
    "merge": (lambda answer: check_split_merge(split, answer), merge),
    "sinusoidal encoding": (check_sinusoidal_encoding, sinusoidal),
    "decoder mask": (check_decoder_mask, decoder_mask),
    "pre-norm residual": (check_pre_norm_residual, pre_norm_residual),
}


def report(checker, answer, capsys) -> tuple[bool, str]:
    verdict = checker(answer)
    return verdict, capsys.readouterr().out


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
def test_every_solution_passes_its_checker(exercise, capsys):
    checker, solution = CHECKERS[exercise]
    verdict, out = report(checker, solution, capsys)
    assert verdict is True and out.startswith("Correct"), out


# Typical wrong answers, each with the words its report must contain.


def gaussian_instead(queries, keys, values, width):
    weights = torch.exp(-(((queries[:, None] - keys) / width) ** 2) / 2)
    return (weights / weights.sum(1, keepdim=True)) @ values


def no_empty_window_check(queries, keys, values, width):
    weights = torch.clamp(1 - ((queries[:, None] - keys) / width) ** 2, min=0)
    return (weights / weights.sum(1, keepdim=True)) @ values  # 0 / 0 = NaN far from every key


def calls_kernel_pooling(queries, keys, values, width):
    return kernel_pooling(queries, keys, values, KERNELS["Epanechnikov"], width)[0]


def fills_in_place(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = torch.arange(scores.shape[-1]) < lens
    scores.masked_fill_(~allowed, float("-inf"))  # changes the caller's scores
    return torch.softmax(scores, -1).nan_to_num(0.0)


def additive_inf_then_nan_to_num(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = torch.arange(scores.shape[-1]) < lens
    additive = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores + additive, -1).nan_to_num(0.0)  # right values, NaN gradient


def uniform_empty_rows(scores, valid_lens):
    lens = valid_lens[:, None, None] if valid_lens.dim() == 1 else valid_lens[:, :, None]
    allowed = torch.arange(scores.shape[-1]) < lens
    return torch.softmax(scores.masked_fill(~allowed, -1e4), -1)


def calls_the_helper(scores, valid_lens):
    return helper_masked_softmax(scores, valid_lens)


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


def split_without_transpose(x, num_heads):
    batch, n, d = x.shape
    return x.reshape(batch, num_heads, n, d // num_heads)


def merge_with_view(x):  # survives merge(split(x)), fails on a fresh tensor
    batch, heads, n, d_head = x.shape
    return x.transpose(1, 2).view(batch, n, heads * d_head)


def sines_and_cosines_swapped(max_len, d_model):
    encoding = sinusoidal(max_len, d_model)
    return torch.stack([encoding[:, 1::2], encoding[:, 0::2]], -1).flatten(1)


def calls_sinusoidal_encoding(max_len, d_model):
    return sinusoidal_encoding(max_len, d_model)


def torch_convention(tokens, pad_id):
    return ~decoder_mask(tokens, pad_id)


def not_causal(tokens, pad_id):
    n = tokens.shape[1]
    return (tokens != pad_id)[:, None, :].expand(-1, n, -1)


def post_norm(x, sublayer, norm):
    return norm(x + sublayer(x))


def no_residual(x, sublayer, norm):
    return sublayer(norm(x))


WRONG = [
    ("kernel pooling", gaussian_instead, "at index"),
    ("kernel pooling", no_empty_window_check, "raise a ValueError that names the query"),
    ("kernel pooling", calls_kernel_pooling, "calls kernel_pooling"),
    ("masked softmax", fills_in_place, "changes its input `scores` in place"),
    ("masked softmax", additive_inf_then_nan_to_num, "the gradient with respect to `scores` is"),
    ("masked softmax", uniform_empty_rows, "a row with no allowed key must be all zeros"),
    ("masked softmax", calls_the_helper, "calls helpers.attention.masked_softmax"),
    ("dot-product attention", unscaled, "looks unscaled"),
    ("dot-product attention", calls_sdpa, "calls torch's scaled_dot_product_attention"),
    ("dot-product attention", detached, "no gradient flows back"),
    ("split", split_without_transpose, "split, x (2, 3, 8), 4 heads"),
    ("merge", merge_with_view, "view size is not compatible"),
    ("sinusoidal encoding", sines_and_cosines_swapped, "sin and cos swapped"),
    ("sinusoidal encoding", calls_sinusoidal_encoding, "calls sinusoidal_encoding"),
    ("decoder mask", torch_convention, "torch's convention"),
    ("decoder mask", not_causal, "not causal"),
    ("pre-norm residual", post_norm, "that is post-norm"),
    ("pre-norm residual", no_residual, "the residual is missing"),
]


@pytest.mark.parametrize(
    ("exercise", "answer", "words"), WRONG, ids=[f"{e}: {a.__name__}" for e, a, _ in WRONG]
)
def test_a_typical_wrong_answer_is_named(exercise, answer, words, capsys):
    verdict, out = report(CHECKERS[exercise][0], answer, capsys)
    assert verdict is False and out.startswith("Not yet") and words in out, out


def test_the_fill_in_place_answer_has_the_right_values_so_only_the_in_place_check_catches_it():
    scores = torch.randn(2, 3, 5)
    lens = torch.tensor([2, 5])
    expected = helper_masked_softmax(scores, lens)
    torch.testing.assert_close(fills_in_place(scores.clone(), lens), expected)


def test_masking_the_pad_queries_rows_too_is_accepted(capsys):
    def rows_too(tokens, pad_id):
        return decoder_mask(tokens, pad_id) & (tokens != pad_id)[:, :, None]

    verdict, out = report(check_decoder_mask, rows_too, capsys)
    assert verdict is True, out


# Answers that are not answers at all: each gets "Not yet" with the reason, never a traceback.


def _none(*args):
    return None


def _raises(*args):
    raise KeyError("oops")


def _scalar(*args):
    return torch.tensor(0.5)


def _text(*args):
    return "weights"


def _exits(*args):
    raise SystemExit(1)


def _meta(*args):
    return torch.empty(2, 3, 5, device="meta")


def _complex(*args):
    return torch.zeros(2, 3, 5, dtype=torch.complex64)


NOT_ANSWERS = {
    _none: "returned None: did the function forget to `return`",
    _raises: "your function raised KeyError: 'oops'",
    _scalar: "shape ()",
    _text: "returned a str, expected a tensor",
    _exits: "raised SystemExit",
    _meta: "meta tensor",
    _complex: "complex tensor",
}


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
@pytest.mark.parametrize("answer", NOT_ANSWERS, ids=lambda f: f.__name__)
def test_every_checker_answers_anything_without_raising(exercise, answer, capsys):
    verdict, out = report(CHECKERS[exercise][0], answer, capsys)
    assert verdict is False and out.startswith("Not yet") and NOT_ANSWERS[answer] in out, out


def test_a_wrong_dtype_is_named(capsys):
    verdict, out = report(
        check_masked_softmax, lambda s, lens: masked_softmax(s, lens).double(), capsys
    )
    assert (
        not verdict
        and "dtype torch.float64, expected torch.float32 (keep the input's dtype)" in out
    )


def test_the_decoder_mask_checker_wants_booleans(capsys):
    verdict, out = report(check_decoder_mask, lambda t, pad: decoder_mask(t, pad).float(), capsys)
    assert not verdict and "expected torch.bool (a boolean mask)" in out


def test_a_checker_leaves_no_profiler_behind():
    import sys

    check_masked_softmax(masked_softmax)
    assert sys.getprofile() is None


def test_changing_the_layers_weights_in_place_is_refused(capsys):
    def scales_the_norm(x, sublayer, norm):
        with torch.no_grad():
            norm.weight.mul_(1.0)  # values unchanged, but written in place
            norm.weight.add_(0.5)
            norm.weight.sub_(0.5)
        return x + sublayer(norm(x))

    verdict, out = report(check_pre_norm_residual, scales_the_norm, capsys)
    assert not verdict and "changes the weights of `norm` or `sublayer` in place" in out, out
