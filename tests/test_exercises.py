import torch

from helpers.attention import masked_softmax
from helpers.exercises import (
    check_kernel_pooling,
    check_masked_softmax,
)
from helpers.kernel_regression import KERNELS, kernel_pooling


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
