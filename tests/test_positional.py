import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from helpers.positional import (
    PositionalEncoding,
    frequencies,
    offset_rotations,
    sinusoidal_encoding,
)


def test_encoding_follows_the_formula_entry_by_entry():
    max_len, d_model = 20, 12
    encoding = sinusoidal_encoding(max_len, d_model)
    assert encoding.shape == (max_len, d_model) and encoding.dtype == torch.float32
    for i in range(max_len):
        for j in range(d_model // 2):
            angle = i / 10000 ** (2 * j / d_model)
            assert encoding[i, 2 * j].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert encoding[i, 2 * j + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_frequencies_fall_geometrically_from_one():
    rates = frequencies(16)
    assert rates[0] == 1.0
    torch.testing.assert_close(
        rates[1:] / rates[:-1], torch.full((7,), 10000 ** (-2 / 16)).double()
    )


@settings(max_examples=50, deadline=None)
@given(
    d_half=st.integers(1, 32),
    offset=st.integers(0, 300),
    start=st.integers(0, 300),
)
def test_an_offset_is_the_same_rotation_at_every_position(d_half, offset, start):
    d_model = 2 * d_half
    encoding = sinusoidal_encoding(start + offset + 1, d_model).double()
    pairs = encoding.reshape(-1, d_half, 2)  # (positions, pairs, (sin, cos))
    rotations = offset_rotations(offset, d_model).double()
    moved = torch.einsum("jab,jb->ja", rotations, pairs[start])
    torch.testing.assert_close(moved, pairs[start + offset], atol=1e-5, rtol=0)
    identity = torch.eye(2, dtype=torch.float64).expand(d_half, 2, 2)
    torch.testing.assert_close(rotations @ rotations.mT, identity, atol=1e-6, rtol=0)


def test_dot_products_depend_only_on_the_distance():
    encoding = sinusoidal_encoding(80, 32).double()
    gram = encoding @ encoding.T
    rates = frequencies(32)
    for i in (0, 13, 40):
        for j in (0, 5, 79):
            expected = torch.cos(rates * (i - j)).sum()
            assert gram[i, j].item() == pytest.approx(expected.item(), abs=1e-5)


def test_positional_encoding_adds_the_rows_from_the_start_position():
    layer = PositionalEncoding(d_model=8, max_len=10)
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(layer(x), x + sinusoidal_encoding(10, 8)[:4])
    torch.testing.assert_close(layer(x, start=6), x + sinusoidal_encoding(10, 8)[6:])
    assert "encoding" not in layer.state_dict()  # rebuilt from the formula, not stored


def test_bad_sizes_get_clear_errors():
    with pytest.raises(ValueError, match="must be even"):
        sinusoidal_encoding(10, 7)
    with pytest.raises(ValueError, match="max_len must be a whole number >= 1, got 0"):
        sinusoidal_encoding(0, 8)
    with pytest.raises(ValueError, match="max_len=10"):
        PositionalEncoding(8, max_len=10)(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match="d_model=8"):
        PositionalEncoding(8)(torch.zeros(1, 3, 6))


def test_a_negative_start_is_refused():
    with pytest.raises(ValueError, match="start must be a whole number >= 0, got -1"):
        PositionalEncoding(8, max_len=10)(torch.zeros(1, 1, 8), start=-1)


def test_each_position_of_batch_first_input_gets_its_own_code():
    """Catches pe[:x.size(0)] on (B, n, d) input, which gives every position P_0 when B = 1."""
    layer = PositionalEncoding(d_model=16, max_len=64)
    for batch in (1, 3, 6):
        torch.testing.assert_close(
            layer(torch.zeros(batch, 6, 16)), sinusoidal_encoding(64, 16)[:6].expand(batch, 6, 16)
        )
