"""Chapter 06's checkers: its solutions and typical wrong answers (run by test_exercises.py,
with every other chapter's)."""

from helpers.exercises import check_decoder_mask
from solutions.ch06_masks import decoder_mask

CHECKERS = {
    "decoder mask": (check_decoder_mask, decoder_mask),
}


def torch_convention(tokens, pad_id):
    return ~decoder_mask(tokens, pad_id)


def not_causal(tokens, pad_id):
    n = tokens.shape[1]
    return (tokens != pad_id)[:, None, :].expand(-1, n, -1)


WRONG = [
    ("decoder mask", torch_convention, "torch's convention"),
    ("decoder mask", not_causal, "not causal"),
]


def test_masking_the_pad_queries_rows_too_is_accepted(run_checker):
    def rows_too(tokens, pad_id):
        return decoder_mask(tokens, pad_id) & (tokens != pad_id)[:, :, None]

    verdict, out = run_checker(check_decoder_mask, rows_too)
    assert verdict is True, out


def test_the_decoder_mask_checker_wants_booleans(run_checker):
    verdict, out = run_checker(check_decoder_mask, lambda t, pad: decoder_mask(t, pad).float())
    assert not verdict and "expected torch.bool (a boolean mask)" in out
