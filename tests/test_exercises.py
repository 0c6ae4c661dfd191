import pytest
import torch

from helpers.attention import DotProductAttention, masked_softmax, merge_heads, split_heads
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
from helpers.masks import causal_padding_mask, padding_mask
from helpers.positional import sinusoidal_encoding


def test_kernel_pooling_checker_accepts_a_right_answer_and_rejects_a_wrong_one(capsys):
    def right(queries, keys, values, width):
        return kernel_pooling(queries, keys, values, KERNELS["Epanechnikov"], width)[0]

    def wrong(queries, keys, values, width):
        return kernel_pooling(queries, keys, values, KERNELS["Gaussian"], width)[0]

    assert check_kernel_pooling(right, "Epanechnikov")
    assert "Correct" in capsys.readouterr().out
    assert not check_kernel_pooling(wrong, "Epanechnikov")
    assert "at index" in capsys.readouterr().out


def test_masked_softmax_checker(capsys):
    assert check_masked_softmax(lambda scores, lens: masked_softmax(scores, valid_lens=lens))

    def uniform_rows(scores, lens):
        lens = lens[:, None, None] if lens.dim() == 1 else lens[..., None]
        allowed = torch.arange(scores.shape[-1]) < lens
        return torch.softmax(scores.masked_fill(~allowed, -1e4), dim=-1)

    assert not check_masked_softmax(uniform_rows)
    report = capsys.readouterr().out
    assert "must be all zeros" in report

    assert not check_masked_softmax(lambda scores, lens: masked_softmax(scores.float(), lens))
    assert "dtype" in capsys.readouterr().out

    assert not check_masked_softmax(lambda scores, lens: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out


def test_dot_product_attention_checker_names_the_mistake(capsys):
    assert check_dot_product_attention(lambda q, k, v, lens: DotProductAttention()(q, k, v, lens))
    capsys.readouterr()

    def unscaled(q, k, v, lens):
        return masked_softmax(q @ k.transpose(1, 2), valid_lens=lens) @ v

    assert not check_dot_product_attention(unscaled)
    assert "looks unscaled" in capsys.readouterr().out

    def no_max_subtracted(q, k, v, lens):
        allowed = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool)
        if lens is not None:
            lens = lens[:, None, None] if lens.dim() == 1 else lens[..., None]
            allowed = torch.arange(k.shape[1]) < lens
        exps = torch.exp(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5) * allowed
        return exps / exps.sum(-1, keepdim=True) @ v

    assert not check_dot_product_attention(no_max_subtracted)
    report = capsys.readouterr().out
    assert "subtract the row maximum" in report and "valid length 0" in report


def test_split_merge_checker(capsys):
    assert check_split_merge(split_heads, merge_heads)

    def split_without_transpose(x, heads):
        batch, n, d = x.shape
        return x.reshape(batch, heads, n, d // heads)

    assert not check_split_merge(split_without_transpose, merge_heads)
    assert "split, x (2, 3, 8), 4 heads" in capsys.readouterr().out

    def merge_with_view(x):  # survives merge(split(x)), fails on a fresh tensor
        batch, heads, n, d_head = x.shape
        return x.transpose(1, 2).view(batch, n, heads * d_head)

    x = torch.ones(1, 2, 4)
    assert torch.equal(merge_with_view(split_heads(x, 2)), x)
    assert not check_split_merge(split_heads, merge_with_view)
    assert "view size is not compatible" in capsys.readouterr().out


def test_sinusoidal_encoding_checker_names_the_mistake(capsys):
    assert check_sinusoidal_encoding(sinusoidal_encoding)

    def all_sines_first(max_len, d_model):
        encoding = sinusoidal_encoding(max_len, d_model)
        return torch.cat([encoding[:, 0::2], encoding[:, 1::2]], dim=1)

    capsys.readouterr()
    assert not check_sinusoidal_encoding(all_sines_first)
    assert "interleave them" in capsys.readouterr().out


def test_decoder_mask_checker_names_the_mistake(capsys):
    assert check_decoder_mask(causal_padding_mask)
    capsys.readouterr()
    assert not check_decoder_mask(lambda tokens, pad_id: ~causal_padding_mask(tokens, pad_id))
    assert "torch's convention" in capsys.readouterr().out
    assert not check_decoder_mask(lambda tokens, pad_id: padding_mask(tokens, pad_id))
    assert "shape" in capsys.readouterr().out  # (B, 1, n) is not (B, n, n)


def test_pre_norm_residual_checker_names_the_mistake(capsys):
    assert check_pre_norm_residual(lambda x, sublayer, norm: x + sublayer(norm(x)))
    capsys.readouterr()
    assert not check_pre_norm_residual(lambda x, sublayer, norm: sublayer(norm(x)))
    assert "the residual is missing" in capsys.readouterr().out


def _none(*args):
    return None


def _raises(*args):
    raise KeyError("oops")


def _scalar(*args):
    return torch.tensor(0.5)


def _text(*args):
    return "weights"


CHECKERS = {
    "kernel pooling": lambda answer: check_kernel_pooling(answer),
    "masked softmax": lambda answer: check_masked_softmax(answer),
    "dot-product attention": lambda answer: check_dot_product_attention(answer),
    "split": lambda answer: check_split_merge(answer, merge_heads),
    "merge": lambda answer: check_split_merge(split_heads, answer),
    "sinusoidal encoding": lambda answer: check_sinusoidal_encoding(answer),
    "decoder mask": lambda answer: check_decoder_mask(answer),
    "pre-norm residual": lambda answer: check_pre_norm_residual(answer),
}
WRONG_ANSWERS = {
    _none: "returned None: did the function forget to `return`",
    _raises: "your function raised KeyError: 'oops'",
    _scalar: "shape ()",
    _text: "returned a str, expected a tensor",
}


@pytest.mark.parametrize("checker", CHECKERS, ids=list(CHECKERS))
@pytest.mark.parametrize("answer", WRONG_ANSWERS, ids=lambda f: f.__name__)
def test_every_checker_answers_every_wrong_answer_without_raising(checker, answer, capsys):
    assert CHECKERS[checker](answer) is False
    out = capsys.readouterr().out
    assert out.startswith("Not yet") and WRONG_ANSWERS[answer] in out


def test_a_wrong_dtype_is_named(capsys):
    assert not check_masked_softmax(lambda scores, lens: masked_softmax(scores, lens).double())
    assert "dtype torch.float64, expected torch.float32 (keep the input's dtype)" in (
        capsys.readouterr().out
    )


def _exits(*args):
    raise SystemExit(1)


def _meta(*args):
    return torch.empty(2, 3, 5, device="meta")


def _complex(*args):
    return torch.zeros(2, 3, 5, dtype=torch.complex64)


@pytest.mark.parametrize(
    ("answer", "message"),
    [(_exits, "raised SystemExit"), (_meta, "meta tensor"), (_complex, "complex tensor")],
)
@pytest.mark.parametrize("checker", CHECKERS, ids=list(CHECKERS))
def test_exotic_answers_get_not_yet_too(checker, answer, message, capsys):
    assert CHECKERS[checker](answer) is False
    assert message in capsys.readouterr().out


def test_the_decoder_mask_checker_wants_booleans(capsys):
    assert not check_decoder_mask(lambda t, pad: causal_padding_mask(t, pad).float() * 0.5)
    assert "expected torch.bool (a boolean mask)" in capsys.readouterr().out
